/**
 * Experiments side by side, as the dashboard's compare page shows them: the best trial of each
 * (by its searcher metric), its hyperparameters, and the curves of those trials on one chart.
 * Free of any widget, so that it is tested on its own.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { DetHubClient, errorText } from '../api/client';
import { IExperiment, ITrial } from '../api/types';
import { bestTrial } from './experiments';
import { ITrace, MetricSeries } from './series';
import { colourAt } from './trialColours';

/** How few and how many experiments are compared (the dashboard's limits). */
export const COMPARE_MIN = 2;
export const COMPARE_MAX = 8;

/** Points per trial and group fetched for the chart. */
const CHART_POINTS = 500;

/**
 * The experiment ids to compare, each once, in order.
 *
 * @throws Error when there are fewer than COMPARE_MIN or more than COMPARE_MAX of them.
 */
export function comparedIds(ids: readonly number[]): number[] {
  const unique = [...new Set(ids)];
  if (unique.length < COMPARE_MIN || unique.length > COMPARE_MAX) {
    throw new Error(
      `Tick from ${COMPARE_MIN} to ${COMPARE_MAX} experiments to compare, not ${unique.length}.`
    );
  }
  return unique;
}

/** One compared experiment: its best trial (null while none has a metric) and its colour. */
export interface ICompared {
  experiment: IExperiment;
  best: ITrial | null;
  colour: string;
}

export class CompareModel {
  /** @throws Error when `ids` are too few or too many (see comparedIds). */
  constructor(
    readonly client: DetHubClient,
    ids: readonly number[]
  ) {
    this.ids = comparedIds(ids);
  }

  readonly ids: readonly number[];

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The experiments, in the order asked for, once loaded. */
  get compared(): readonly ICompared[] {
    return this._compared;
  }

  /** The best trials' curves. */
  get series(): MetricSeries {
    return this._series;
  }

  get loaded(): boolean {
    return this._loaded;
  }

  /** What could not be loaded, naming it, or null. */
  get error(): string | null {
    return this._error;
  }

  /** The best trials, one per experiment that has one. */
  get bestTrials(): ITrial[] {
    return this._compared.map(c => c.best).filter((t): t is ITrial => t !== null);
  }

  /**
   * Loads each experiment, its trials and the metrics of its best trial, afresh. Another load
   * started meanwhile wins: what this one finds is dropped.
   */
  async load(): Promise<void> {
    const round = ++this._round;
    this._error = null;
    this._changed.emit();
    try {
      const compared = await Promise.all(
        this.ids.map(async (id, n) => {
          let experiment: IExperiment;
          let trials: ITrial[];
          try {
            [experiment, trials] = await Promise.all([
              this.client.getExperiment(id),
              this.client.listTrials(id)
            ]);
          } catch (error) {
            throw new Error(`Could not load experiment ${id} to compare: ${errorText(error)}`);
          }
          return {
            experiment,
            best: bestTrial(trials, experiment.smaller_is_better),
            colour: colourAt(n)
          };
        })
      );
      const series = new MetricSeries();
      const rows = await Promise.all(
        compared.map(async ({ experiment, best }) => {
          if (!best) {
            return [];
          }
          try {
            return await this.client.trialMetrics(best.id, { maxPoints: CHART_POINTS });
          } catch (error) {
            throw new Error(
              `Could not load the metrics of trial ${best.id} (the best of experiment ` +
                `${experiment.id}): ${errorText(error)}`
            );
          }
        })
      );
      rows.flat().forEach(row => series.add(row));
      if (round !== this._round || this._disposed) {
        return;
      }
      this._compared = compared;
      this._series = series;
    } catch (error) {
      if (round !== this._round || this._disposed) {
        return;
      }
      this._error = errorText(error);
    }
    this._loaded = true;
    this._changed.emit();
  }

  /**
   * The curves of `metric`: one per best trial and group, named by experiment and trial, in
   * its experiment's colour.
   */
  traces(metric: string): ITrace[] {
    const byTrial = new Map(
      this._compared.filter(c => c.best).map(c => [(c.best as ITrial).id, c] as const)
    );
    return this._series.traces(metric).map(trace => {
      const compared = byTrial.get(trace.trialId);
      return compared
        ? {
            ...trace,
            name: `experiment ${compared.experiment.id} trial ${trace.trialId} ${trace.group}`,
            colour: compared.colour
          }
        : trace;
    });
  }

  dispose(): void {
    this._disposed = true;
    Signal.clearData(this);
  }

  private _compared: ICompared[] = [];
  private _series = new MetricSeries();
  private _loaded = false;
  private _error: string | null = null;
  private _round = 0;
  private _disposed = false;
  private readonly _changed = new Signal<this, void>(this);
}

/** The experiments ticked in the sidebar's list to compare. */
export class CompareSelection {
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The ticked experiments' ids, ascending. */
  get ids(): number[] {
    return [...this._ids].sort((a, b) => a - b);
  }

  /** Whether enough, and not too many, are ticked to compare them. */
  get ready(): boolean {
    return this._ids.size >= COMPARE_MIN && this._ids.size <= COMPARE_MAX;
  }

  /** Whether COMPARE_MAX are ticked: no more can be. */
  get full(): boolean {
    return this._ids.size >= COMPARE_MAX;
  }

  has(id: number): boolean {
    return this._ids.has(id);
  }

  /** Ticks an experiment, or unticks it; false (and nothing done) when ticking one too many. */
  set(id: number, on: boolean): boolean {
    if (on === this._ids.has(id)) {
      return true;
    }
    if (on && this.full) {
      return false;
    }
    if (on) {
      this._ids.add(id);
    } else {
      this._ids.delete(id);
    }
    this._changed.emit();
    return true;
  }

  clear(): void {
    if (this._ids.size) {
      this._ids.clear();
      this._changed.emit();
    }
  }

  dispose(): void {
    Signal.clearData(this);
  }

  private readonly _ids = new Set<number>();
  private readonly _changed = new Signal<this, void>(this);
}
