/**
 * What an experiment view's trials table shows and how: sorted by a column (up or down),
 * filtered by state and by words, and the trials ticked in it, the only ones the view's chart
 * then draws. Free of any widget, so that it is tested on its own.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { ITrial } from '../api/types';
import { matchesWords } from './experiments';
import { flattenHparams, hparamsText, shortValue } from './hparams';
import { ITrace } from './series';

/**
 * A column the table sorts by: a trial's field, or `hparam:<dotted name>` for a
 * hyperparameter's.
 */
export type TrialColumn =
  'id' | 'state' | 'batches' | 'progress' | 'metric' | 'restarts' | `hparam:${string}`;

/** The column of a hyperparameter. */
export function hparamColumn(name: string): TrialColumn {
  return `hparam:${name}`;
}

export interface ITrialSort {
  column: TrialColumn;
  descending: boolean;
}

/** What a trial is sorted on in a column: a number, a text, or null (nothing there). */
export function sortValue(trial: ITrial, column: TrialColumn): number | string | null {
  const finite = (value: number | null | undefined): number | null =>
    typeof value === 'number' && Number.isFinite(value) ? value : null;
  switch (column) {
    case 'id':
      return trial.id;
    case 'state':
      return trial.state;
    case 'batches':
      return trial.steps_completed;
    case 'progress':
      return finite(trial.progress);
    case 'metric':
      return finite(trial.searcher_metric_value);
    case 'restarts':
      return trial.restarts;
  }
  const value = flattenHparams(trial.hparams)[column.slice('hparam:'.length)];
  if (value === undefined || value === null) {
    return null;
  }
  return typeof value === 'number' ? value : shortValue(value).toLowerCase();
}

/**
 * `trials` in the order of `sort`: numbers before text, and trials with nothing in the column
 * (no metric yet) last whichever way; equals by id.
 */
export function sortTrials(trials: readonly ITrial[], sort: ITrialSort): ITrial[] {
  const keyed = trials.map(trial => ({ trial, key: sortValue(trial, sort.column) }));
  keyed.sort((a, b) => {
    if (a.key === null || b.key === null) {
      return (a.key === null ? 1 : 0) - (b.key === null ? 1 : 0) || a.trial.id - b.trial.id;
    }
    let order: number;
    if (typeof a.key === typeof b.key) {
      order = a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
    } else {
      order = typeof a.key === 'number' ? -1 : 1;
    }
    return (sort.descending ? -order : order) || a.trial.id - b.trial.id;
  });
  return keyed.map(k => k.trial);
}

/** What the table lists: trials in one state (all when empty) that match some words. */
export interface ITrialFilter {
  state: string;
  /** Words each found in the trial's state or hyperparameters (`lr=0.1`), or its id. */
  query: string;
}

export function matchesTrial(trial: ITrial, filter: ITrialFilter): boolean {
  if (filter.state && trial.state !== filter.state) {
    return false;
  }
  const text = [trial.state, trial.run_state ?? '', hparamsText(trial.hparams)].join('\n');
  return matchesWords(filter.query, trial.id, text);
}

/**
 * The curves a chart draws: those of the ticked trials (all when none is), each in its trial's
 * colour.
 */
export function drawnTraces(
  traces: readonly ITrace[],
  ticked: ReadonlySet<number>,
  colours: ReadonlyMap<number, string>
): ITrace[] {
  return traces
    .filter(trace => ticked.size === 0 || ticked.has(trace.trialId))
    .map(trace => ({ ...trace, colour: colours.get(trace.trialId) }));
}

/** The table's sort, filter and ticks, as the user set them. */
export class TrialTable {
  /** Emitted when the sort, the filter or the ticks change. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get sort(): ITrialSort {
    return this._sort;
  }

  /** Sorts by `column`: up, or the other way when it is sorted by it already. */
  sortBy(column: TrialColumn): void {
    const descending = this._sort.column === column ? !this._sort.descending : false;
    this._sort = { column, descending };
    this._changed.emit();
  }

  get filter(): ITrialFilter {
    return this._filter;
  }

  /** Lists the trials in `state` only (every one when empty). */
  set state(state: string) {
    if (state !== this._filter.state) {
      this._filter = { ...this._filter, state };
      this._changed.emit();
    }
  }

  set query(query: string) {
    if (query !== this._filter.query) {
      this._filter = { ...this._filter, query };
      this._changed.emit();
    }
  }

  /** The ticked trials: when there are any, the chart draws only them. */
  get ticked(): ReadonlySet<number> {
    return this._ticked;
  }

  /** Ticks a trial, or unticks it. */
  tick(trialId: number, on: boolean): void {
    if (on === this._ticked.has(trialId)) {
      return;
    }
    const ticked = new Set(this._ticked);
    if (on) {
      ticked.add(trialId);
    } else {
      ticked.delete(trialId);
    }
    this._ticked = ticked;
    this._changed.emit();
  }

  /** Unticks every trial: the chart draws them all again. */
  untickAll(): void {
    if (this._ticked.size) {
      this._ticked = new Set();
      this._changed.emit();
    }
  }

  /** The trials listed, in order. */
  rows(trials: readonly ITrial[]): ITrial[] {
    return sortTrials(
      trials.filter(trial => matchesTrial(trial, this._filter)),
      this._sort
    );
  }

  /** The states the trials are in, to filter by (and the one filtered by, even if none is). */
  states(trials: readonly ITrial[]): string[] {
    const states = new Set(trials.map(t => t.state as string));
    if (this._filter.state) {
      states.add(this._filter.state);
    }
    return [...states].sort();
  }

  dispose(): void {
    Signal.clearData(this);
  }

  private _sort: ITrialSort = { column: 'id', descending: false };
  private _filter: ITrialFilter = { state: '', query: '' };
  private _ticked: ReadonlySet<number> = new Set();
  private readonly _changed = new Signal<this, void>(this);
}
