/**
 * The sidebar's experiment list: what the master has, narrowed to "mine" or "all" and by a
 * search box, with each experiment's best searcher metric. It follows the master's experiment
 * stream while it is started (the sidebar starts it while the list is shown), so it never
 * polls. Free of any widget, so that it is tested on its own.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { DetHubClient, errorText } from '../api/client';
import { ExperimentListEvent, IExperiment, ITrial } from '../api/types';
import { StreamFollower } from './follower';
import { IPoint } from './sparkline';

/** Whose experiments the list shows. */
export type Scope = 'mine' | 'all';

/**
 * The trial with the best searcher-metric value (the smallest, or the largest when bigger is
 * better; the first of equals), or null when no trial has reported one.
 */
export function bestTrial(trials: readonly ITrial[], smallerIsBetter: boolean): ITrial | null {
  let best: ITrial | null = null;
  for (const trial of trials) {
    const value = trial.searcher_metric_value;
    if (typeof value !== 'number' || !Number.isFinite(value)) {
      continue;
    }
    const known = best?.searcher_metric_value as number;
    if (best === null || (smallerIsBetter ? value < known : value > known)) {
      best = trial;
    }
  }
  return best;
}

/**
 * The best searcher-metric value of an experiment's trials (the smallest, or the largest when
 * bigger is better), or null when no trial has reported one.
 */
export function bestMetric(trials: readonly ITrial[], smallerIsBetter: boolean): number | null {
  return bestTrial(trials, smallerIsBetter)?.searcher_metric_value ?? null;
}

/**
 * Whether a search matches a thing with this id and text: every word of `query` must be found
 * (ignoring case) in `text`, or be the id (`12` or `#12`).
 */
export function matchesWords(query: string, id: number, text: string): boolean {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  const haystack = text.toLowerCase();
  return words.every(word => {
    const asId = /^#?(\d+)$/.exec(word);
    if (asId && Number(asId[1]) === id) {
      return true;
    }
    return haystack.includes(word);
  });
}

/**
 * Whether an experiment matches a search: every word of `query` must be found (ignoring case)
 * in its name, state, owner, description or a label, or be its id (`12` or `#12`).
 */
export function matchesQuery(experiment: IExperiment, query: string): boolean {
  const text = [
    experiment.name,
    experiment.state,
    experiment.owner,
    experiment.description ?? '',
    ...(experiment.labels ?? [])
  ].join('\n');
  return matchesWords(query, experiment.id, text);
}

/** A number as the panel prints a metric: 4 significant digits, exponents when tiny or huge. */
export function formatMetric(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) {
    return '–';
  }
  const magnitude = Math.abs(value);
  if (magnitude !== 0 && (magnitude < 1e-3 || magnitude >= 1e5)) {
    return value.toExponential(3);
  }
  return String(Number(value.toPrecision(4)));
}

/** The experiments of the sidebar and what it shows of them. */
export class ExperimentListModel {
  constructor(
    readonly client: DetHubClient,
    options: {
      limit?: number;
      maxTrialFetches?: number;
      detailInterval?: number;
      retryDelay?: number;
      maxDelay?: number;
    } = {}
  ) {
    this._limit = options.limit ?? 100;
    this._maxTrialFetches = options.maxTrialFetches ?? 20;
    this._detailInterval = options.detailInterval ?? 2000;
    this._retryDelay = options.retryDelay ?? 500;
    this._maxDelay = options.maxDelay ?? 30000;
  }

  /** Emitted whenever anything shown changes. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The user the notebook server acts as on the master (null until known, or when unknown). */
  get user(): string | null {
    return this._user;
  }

  set user(user: string | null) {
    if (user !== this._user) {
      this._user = user;
      if (this._scope === 'mine') {
        this._reset();
      }
      this._changed.emit();
    }
  }

  get scope(): Scope {
    return this._scope;
  }

  set scope(scope: Scope) {
    if (scope !== this._scope) {
      this._scope = scope;
      this._reset();
      this._changed.emit();
    }
  }

  get query(): string {
    return this._query;
  }

  set query(query: string) {
    if (query !== this._query) {
      this._query = query;
      this._changed.emit();
    }
  }

  /** Whether a first list has arrived for the current scope. */
  get loaded(): boolean {
    return this._loaded;
  }

  /** What went wrong with the stream, or null while it is fine. */
  get error(): string | null {
    return this._follower.error;
  }

  /** Whether the master's experiment stream is followed now. */
  get live(): boolean {
    return this._follower.live;
  }

  /** Every experiment of the scope, newest first. */
  get experiments(): readonly IExperiment[] {
    return this._experiments;
  }

  /** The experiments the search lets through. */
  get shown(): IExperiment[] {
    return this._experiments.filter(e => matchesQuery(e, this._query));
  }

  /**
   * An experiment's best searcher-metric value, when known: as the master sends it, or from
   * its trials as last fetched (a master that does not send it).
   */
  best(id: number): number | null {
    const experiment = this._experiments.find(e => e.id === id);
    if (experiment && experiment.best_searcher_metric !== undefined) {
      return experiment.best_searcher_metric;
    }
    const trials = this._trials.get(id);
    return experiment && trials ? bestMetric(trials, experiment.smaller_is_better) : null;
  }

  /**
   * Follows the master's experiment list: a snapshot, then every change as it happens, until
   * `stop`. Does nothing when already following.
   */
  start(): void {
    const scope = this._scope;
    this._follower.start((signal, problem) =>
      this.client.followExperimentList(event => this._onEvent(event, signal), {
        owner: scope === 'mine' ? (this._user ?? undefined) : undefined,
        archived: false,
        limit: this._limit,
        signal,
        retryDelay: this._retryDelay,
        maxDelay: this._maxDelay,
        onProblem: problem
      })
    );
  }

  /** Stops following the master's list (what was listed stays shown). */
  stop(): void {
    if (!this._follower.stop()) {
      return;
    }
    for (const timer of this._detailTimers.values()) {
      clearTimeout(timer);
    }
    this._detailTimers.clear();
  }

  /** Follows the list anew, from a fresh snapshot (the ↻ button). */
  restart(): void {
    this.stop();
    this.start();
  }

  dispose(): void {
    this.stop();
    Signal.clearData(this);
  }

  /** Whether an experiment's row is open on its trials. */
  isExpanded(id: number): boolean {
    return this._expanded.has(id);
  }

  /** Opens or closes an experiment's row; an opened one's trials are fetched at once. */
  async toggle(id: number): Promise<void> {
    if (this._expanded.delete(id)) {
      this._changed.emit();
      return;
    }
    this._expanded.add(id);
    this._changed.emit();
    const experiment = this._experiments.find(e => e.id === id);
    if (experiment) {
      this._detailAt.set(id, Date.now());
      await this.refreshDetail(experiment);
    }
  }

  /** A trial's searcher-metric curve (step, value), for its sparkline. */
  curve(trialId: number): readonly IPoint[] | undefined {
    return this._curves.get(trialId)?.points;
  }

  /** An opened experiment's trials, as last fetched. */
  trials(id: number): readonly ITrial[] | undefined {
    return this._trials.get(id);
  }

  /**
   * Fetches an opened experiment's trials, and the searcher-metric curve of each trial that
   * trained on since its curve was fetched.
   */
  async refreshDetail(experiment: IExperiment): Promise<void> {
    const trials = await this.client.listTrials(experiment.id);
    this._trials.set(experiment.id, trials);
    this._changed.emit();
    for (const trial of trials.slice(0, this._maxTrialFetches)) {
      const known = this._curves.get(trial.id);
      if (known && known.steps === trial.steps_completed && known.state === trial.state) {
        continue;
      }
      const rows = await this.client.trialMetrics(trial.id, {
        group: 'validation',
        metric: experiment.searcher_metric,
        maxPoints: 40
      });
      const points = rows
        .map(row => ({ x: row.steps_completed, y: row.metrics[experiment.searcher_metric] }))
        .filter((p): p is IPoint => typeof p.y === 'number');
      this._curves.set(trial.id, { steps: trial.steps_completed, state: trial.state, points });
      this._changed.emit();
    }
  }

  /** Puts an experiment's new state (after an action) into the list at once. */
  update(experiment: IExperiment): void {
    const index = this._experiments.findIndex(e => e.id === experiment.id);
    if (index >= 0) {
      this._experiments = [...this._experiments];
      this._experiments[index] = experiment;
      this._changed.emit();
    }
  }

  private _onEvent(event: ExperimentListEvent, signal: AbortSignal): void {
    if (signal.aborted) {
      return;
    }
    if (event.kind === 'snapshot') {
      this._experiments = [...event.experiments].sort((a, b) => b.id - a.id);
      this._loaded = true;
      for (const experiment of this._experiments) {
        if (this._expanded.has(experiment.id)) {
          this._refreshDetailSoon(experiment.id);
        }
      }
    } else if (event.kind === 'experiment') {
      const { experiment } = event;
      const rest = this._experiments.filter(e => e.id !== experiment.id);
      // Newest first; an old experiment brought back (unarchived) takes its place by id.
      const at = rest.findIndex(e => e.id < experiment.id);
      rest.splice(at < 0 ? rest.length : at, 0, experiment);
      this._experiments = rest;
      if (this._expanded.has(experiment.id)) {
        this._refreshDetailSoon(experiment.id);
      }
    } else {
      this._experiments = this._experiments.filter(e => e.id !== event.id);
    }
    this._follower.heard();
    this._changed.emit();
  }

  /**
   * Fetches an opened experiment's trials again after it changed: at once, or, when they
   * were fetched less than `detailInterval` ago, once that much time has passed (trials
   * reporting progress change their experiment many times a second).
   */
  private _refreshDetailSoon(id: number): void {
    if (this._detailTimers.has(id)) {
      return;
    }
    const wait = (this._detailAt.get(id) ?? 0) + this._detailInterval - Date.now();
    const run = (): void => {
      this._detailTimers.delete(id);
      const experiment = this._experiments.find(e => e.id === id);
      if (!experiment || !this._expanded.has(id) || !this._follower.live) {
        return;
      }
      this._detailAt.set(id, Date.now());
      this.refreshDetail(experiment).catch(error => {
        console.warn(`det_hub: the trials of experiment ${id}: ${errorText(error)}`);
      });
    };
    if (wait <= 0) {
      run();
    } else {
      this._detailTimers.set(id, setTimeout(run, wait));
    }
  }

  /** Forgets the list of the previous scope or user, and follows the new one if following. */
  private _reset(): void {
    this._experiments = [];
    this._loaded = false;
    if (this._follower.live) {
      this.restart();
    }
  }

  private _user: string | null = null;
  private _scope: Scope = 'mine';
  private _query = '';
  private _loaded = false;
  private _experiments: IExperiment[] = [];
  private readonly _follower = new StreamFollower(() => this._changed.emit());
  private readonly _trials = new Map<number, ITrial[]>();
  private readonly _expanded = new Set<number>();
  private readonly _curves = new Map<number, { steps: number; state: string; points: IPoint[] }>();
  private readonly _detailAt = new Map<number, number>();
  private readonly _detailTimers = new Map<number, ReturnType<typeof setTimeout>>();
  private readonly _limit: number;
  private readonly _maxTrialFetches: number;
  private readonly _detailInterval: number;
  private readonly _retryDelay: number;
  private readonly _maxDelay: number;
  private readonly _changed = new Signal<this, void>(this);
}
