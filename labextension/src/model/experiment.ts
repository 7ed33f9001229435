/**
 * What an experiment's view shows: the experiment, its trials and checkpoints, the rung table
 * of an ASHA search, the search view with its hyperparameter importance, its metric curves (the stored ones, downsampled by the master, then each
 * report as it arrives through the metric stream) and a trial's log, followed while it runs.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { DetHubClient } from '../api/client';
import {
  ICheckpoint,
  IExperiment,
  IHyperparameterImportance,
  ILogLine,
  IModelVersion,
  ISearcherView,
  ISearchView,
  IStreamState,
  ITrial,
  isTerminal
} from '../api/types';
import { MetricSeries } from './series';

/** Points per trial and group fetched for the chart at first. */
const STORED_POINTS = 500;
/** The most log lines kept in view; older ones are dropped. */
export const MAX_LOG_LINES = 5000;
/** The searchers whose rung table the master gives. */
export const RUNG_SEARCHERS: ReadonlySet<string> = new Set(['adaptive_asha', 'async_halving']);

/** Whether an experiment's search has rungs (an ASHA search). */
export function hasRungs(experiment: IExperiment): boolean {
  const searcher = experiment.config?.searcher as { name?: unknown } | undefined;
  return typeof searcher?.name === 'string' && RUNG_SEARCHERS.has(searcher.name);
}

/** What the search view is drawn from: each trial's searcher metric. */
function metricKey(trials: readonly ITrial[]): string {
  return JSON.stringify(trials.map(t => [t.id, t.searcher_metric_value]));
}

export class ExperimentModel {
  constructor(
    readonly client: DetHubClient,
    readonly id: number
  ) {}

  /** Emitted when anything shown changes; reports arriving fast are gathered first. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get experiment(): IExperiment | null {
    return this._experiment;
  }

  get trials(): readonly ITrial[] {
    return this._trials;
  }

  get checkpoints(): readonly ICheckpoint[] {
    return this._checkpoints;
  }

  get series(): MetricSeries {
    return this._series;
  }

  /** The search at a glance, with its rung table: ASHA searches only (null otherwise). */
  get searcher(): ISearcherView | null {
    return this._searcher;
  }

  /** The search at a glance: null until two trials have a searcher metric. */
  get search(): ISearchView | null {
    return this._search;
  }

  /** Hyperparameter importance (with the search view), or null. */
  get importance(): IHyperparameterImportance | null {
    return this._importance;
  }

  /** Why the master gave no importance (optuna or scikit-learn missing there), or null. */
  get importanceError(): string | null {
    return this._importanceError;
  }

  /** The model versions registered from this view, by checkpoint. */
  registered(uuid: string): readonly IModelVersion[] {
    return this._registered.get(uuid) ?? [];
  }

  /** Shows a checkpoint's new model version by it. */
  noteRegistered(version: IModelVersion): void {
    const known = this._registered.get(version.checkpoint_uuid) ?? [];
    this._registered.set(version.checkpoint_uuid, [...known, version]);
    this._emit(true);
  }

  get error(): string | null {
    return this._error;
  }

  /** Whether the metric stream is being followed now. */
  get live(): boolean {
    return this._live;
  }

  /**
   * Loads the experiment, its trials, checkpoints and stored metrics, then follows its metric
   * stream until it is over or the model is disposed.
   */
  async start(): Promise<void> {
    try {
      await this.refresh();
      const trials = this._trials;
      const stored = await Promise.all(
        trials.map(t => this.client.trialMetrics(t.id, { maxPoints: STORED_POINTS }))
      );
      for (const rows of stored) {
        rows.forEach(row => this._series.add(row));
      }
      this._emit();
    } catch (error) {
      this._fail(error);
      return;
    }
    void this._follow();
  }

  /** Fetches the experiment, its trials, its checkpoints and an ASHA search's rungs again. */
  async refresh(): Promise<void> {
    const [experiment, trials, checkpoints] = await Promise.all([
      this.client.getExperiment(this.id),
      this.client.listTrials(this.id),
      this.client.listCheckpoints(this.id)
    ]);
    this._experiment = experiment;
    this._trials = trials;
    this._checkpoints = checkpoints;
    this._searcher = hasRungs(experiment) ? await this.client.getSearcher(this.id) : null;
    this._searchKey = metricKey(trials);
    await this._loadSearch();
    this._error = null;
    this._emit(true);
  }

  /** Puts an experiment's new state (after an action) in view at once. */
  update(experiment: IExperiment): void {
    this._experiment = experiment;
    this._emit(true);
  }

  get isDisposed(): boolean {
    return this._stop.signal.aborted;
  }

  dispose(): void {
    this._stop.abort();
    if (this._timer !== null) {
      clearTimeout(this._timer);
    }
    Signal.clearData(this);
  }

  private async _follow(): Promise<void> {
    this._live = true;
    this._emit(true);
    try {
      await this.client.followExperiment(
        this.id,
        event => {
          if (event.kind === 'metrics') {
            this._series.add(event.row);
            this._emit();
          } else if (event.kind === 'rolled_back') {
            this._series.rollBack(event.rolledBack.trial_id, event.rolledBack.steps_completed);
            this._emit();
          } else {
            this._onState(event.state);
          }
        },
        { afterId: this._series.lastId, signal: this._stop.signal }
      );
    } catch (error) {
      this._fail(error);
    } finally {
      this._live = false;
    }
    if (!this.isDisposed) {
      // The experiment is over: its final trials and checkpoints.
      await this.refresh().catch(error => this._fail(error));
    }
  }

  private _onState(state: IStreamState): void {
    const experiment = this._experiment;
    if (experiment) {
      this._experiment = { ...experiment, state: state.state, progress: state.progress };
    }
    const known = new Map(this._trials.map(t => [t.id, t]));
    let fresh = false;
    for (const update of state.trials) {
      const trial = known.get(update.id);
      if (trial) {
        known.set(update.id, { ...trial, ...update });
      } else {
        fresh = true;
      }
    }
    this._trials = [...known.values()];
    if (fresh || isTerminal(state.state)) {
      // New trials (their hyperparameters), or the last checkpoints.
      void this.refresh().catch(error => this._fail(error));
    } else {
      void this._refreshSoon();
      if (metricKey(this._trials) !== this._searchKey) {
        void this._searchAgain();
      }
    }
    this._emit(true);
  }

  /** The search view and importance, fetched again after a trial's metric changed. */
  private async _searchAgain(): Promise<void> {
    if (this._searching) {
      this._searchPending = true;
      return;
    }
    this._searching = true;
    try {
      do {
        this._searchPending = false;
        this._searchKey = metricKey(this._trials);
        await this._loadSearch();
        this._emit();
      } while (this._searchPending && !this.isDisposed);
    } catch {
      // The next change of a metric tries again.
      this._searchKey = '';
    } finally {
      this._searching = false;
    }
  }

  private async _loadSearch(): Promise<void> {
    this._search = await this.client.getSearchView(this.id);
    if (this._search === null) {
      this._importance = null;
      this._importanceError = null;
      return;
    }
    try {
      this._importance = await this.client.getImportance(this.id);
      this._importanceError = null;
    } catch (error) {
      this._importance = null;
      this._importanceError = error instanceof Error ? error.message : String(error);
    }
  }

  /**
   * Checkpoints, and an ASHA search's rungs, are looked at again at most every few seconds
   * while trials report.
   */
  private async _refreshSoon(): Promise<void> {
    const now = Date.now();
    if (now - this._checkpointsAt < 3000) {
      return;
    }
    this._checkpointsAt = now;
    const experiment = this._experiment;
    try {
      const [checkpoints, searcher] = await Promise.all([
        this.client.listCheckpoints(this.id),
        experiment && hasRungs(experiment) ? this.client.getSearcher(this.id) : null
      ]);
      this._checkpoints = checkpoints;
      this._searcher = searcher;
      this._emit();
    } catch {
      // The next state change tries again.
    }
  }

  private _fail(error: unknown): void {
    if (this.isDisposed) {
      return;
    }
    this._error = error instanceof Error ? error.message : String(error);
    this._emit(true);
  }

  /** Emits `changed` now, or within 200 ms for a burst of reports. */
  private _emit(now = false): void {
    if (this.isDisposed) {
      return;
    }
    if (now) {
      if (this._timer !== null) {
        clearTimeout(this._timer);
        this._timer = null;
      }
      this._changed.emit();
    } else if (this._timer === null) {
      this._timer = setTimeout(() => {
        this._timer = null;
        this._changed.emit();
      }, 200);
    }
  }

  private _experiment: IExperiment | null = null;
  private _trials: ITrial[] = [];
  private _checkpoints: ICheckpoint[] = [];
  private _searcher: ISearcherView | null = null;
  private _search: ISearchView | null = null;
  private _importance: IHyperparameterImportance | null = null;
  private _importanceError: string | null = null;
  /** The trials' metrics the search view was fetched for. */
  private _searchKey = '';
  private _searching = false;
  private _searchPending = false;
  private readonly _registered = new Map<string, IModelVersion[]>();
  private _error: string | null = null;
  private _live = false;
  private _checkpointsAt = 0;
  private _timer: ReturnType<typeof setTimeout> | null = null;
  private readonly _series = new MetricSeries();
  private readonly _stop = new AbortController();
  private readonly _changed = new Signal<this, void>(this);
}

/** A trial's log lines, fetched and, while `follow` is on and the trial runs, followed. */
export class TrialLogModel {
  constructor(readonly client: DetHubClient) {}

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get trialId(): number | null {
    return this._trialId;
  }

  get lines(): readonly ILogLine[] {
    return this._lines;
  }

  get follow(): boolean {
    return this._follow;
  }

  /** Whether lines are being read now (false once the trial's log has ended). */
  get reading(): boolean {
    return this._reading;
  }

  get error(): string | null {
    return this._error;
  }

  /** Shows `trialId`'s log from its start; `follow` keeps reading while it runs. */
  show(trialId: number | null, follow = this._follow): void {
    this._abort?.abort();
    this._trialId = trialId;
    this._follow = follow;
    this._lines = [];
    this._afterId = 0;
    this._error = null;
    this._read();
  }

  /** Turns following on (reading on from the last line) or off. */
  setFollow(follow: boolean): void {
    if (follow === this._follow) {
      return;
    }
    this._follow = follow;
    this._abort?.abort();
    this._read();
  }

  dispose(): void {
    this._abort?.abort();
    Signal.clearData(this);
  }

  private _read(): void {
    const trialId = this._trialId;
    this._changed.emit();
    if (trialId === null) {
      return;
    }
    const abort = new AbortController();
    this._abort = abort;
    this._reading = true;
    void this.client
      .followLogs(
        trialId,
        lines => {
          if (abort.signal.aborted) {
            return;
          }
          this._lines = [...this._lines, ...lines].slice(-MAX_LOG_LINES);
          this._afterId = this._lines[this._lines.length - 1].id;
          this._changed.emit();
        },
        { afterId: this._afterId, follow: this._follow, signal: abort.signal }
      )
      .catch(error => {
        if (!abort.signal.aborted) {
          this._error = error instanceof Error ? error.message : String(error);
        }
      })
      .finally(() => {
        if (this._abort === abort) {
          this._reading = false;
          this._changed.emit();
        }
      });
  }

  private _trialId: number | null = null;
  private _lines: ILogLine[] = [];
  private _afterId = 0;
  private _follow = true;
  private _reading = false;
  private _error: string | null = null;
  private _abort: AbortController | null = null;
  private readonly _changed = new Signal<this, void>(this);
}
