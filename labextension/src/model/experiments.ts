/**
 * The sidebar's experiment list: what the master has, narrowed to "mine" or "all" and by a
 * search box, with each experiment's best searcher metric. Free of any widget, so that it is
 * tested on its own.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { DetHubClient } from '../api/client';
import { IExperiment, ITrial, isTerminal } from '../api/types';
import { IPoint } from './sparkline';

/** Whose experiments the list shows. */
export type Scope = 'mine' | 'all';

/**
 * The best searcher-metric value of an experiment's trials (the smallest, or the largest when
 * bigger is better), or null when no trial has reported one.
 */
export function bestMetric(trials: readonly ITrial[], smallerIsBetter: boolean): number | null {
  let best: number | null = null;
  for (const trial of trials) {
    const value = trial.searcher_metric_value;
    if (typeof value !== 'number' || !Number.isFinite(value)) {
      continue;
    }
    if (best === null || (smallerIsBetter ? value < best : value > best)) {
      best = value;
    }
  }
  return best;
}

/**
 * Whether an experiment matches a search: every word of `query` must be found (ignoring case)
 * in its name, state, owner, description or a label, or be its id (`12` or `#12`).
 */
export function matchesQuery(experiment: IExperiment, query: string): boolean {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  const text = [
    experiment.name,
    experiment.state,
    experiment.owner,
    experiment.description ?? '',
    ...(experiment.labels ?? [])
  ]
    .join('\n')
    .toLowerCase();
  return words.every(word => {
    const id = /^#?(\d+)$/.exec(word);
    if (id && Number(id[1]) === experiment.id) {
      return true;
    }
    return text.includes(word);
  });
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
    options: { limit?: number; maxTrialFetches?: number } = {}
  ) {
    this._limit = options.limit ?? 100;
    this._maxTrialFetches = options.maxTrialFetches ?? 20;
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
      this._changed.emit();
    }
  }

  get scope(): Scope {
    return this._scope;
  }

  set scope(scope: Scope) {
    if (scope !== this._scope) {
      this._scope = scope;
      this._experiments = [];
      this._loaded = false;
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

  /** Why the last refresh failed, or null. */
  get error(): string | null {
    return this._error;
  }

  /** Every experiment of the scope, newest first. */
  get experiments(): readonly IExperiment[] {
    return this._experiments;
  }

  /** The experiments the search lets through. */
  get shown(): IExperiment[] {
    return this._experiments.filter(e => matchesQuery(e, this._query));
  }

  /** An experiment's best searcher-metric value, when known. */
  best(id: number): number | null {
    return this._best.get(id)?.value ?? null;
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
      await this.refreshDetail(experiment);
    }
  }

  /** A trial's searcher-metric curve (step, value), for its sparkline. */
  curve(trialId: number): readonly IPoint[] | undefined {
    return this._curves.get(trialId)?.points;
  }

  /** Trials as last fetched for an experiment (for the best metric, or when expanded). */
  trials(id: number): readonly ITrial[] | undefined {
    return this._trials.get(id);
  }

  /**
   * Fetches the list, and the trials of the experiments whose best metric may have changed
   * since it was last looked at: unfinished ones, and finished ones not yet seen finished.
   */
  async refresh(): Promise<void> {
    const scope = this._scope;
    let experiments: IExperiment[];
    try {
      experiments = await this.client.listExperiments({
        owner: scope === 'mine' ? (this._user ?? undefined) : undefined,
        archived: false,
        limit: this._limit
      });
    } catch (error) {
      this._error = error instanceof Error ? error.message : String(error);
      this._changed.emit();
      throw error;
    }
    if (scope !== this._scope) {
      return;
    }
    this._experiments = experiments;
    this._loaded = true;
    this._error = null;
    this._changed.emit();

    for (const experiment of experiments.filter(e => this._expanded.has(e.id))) {
      await this.refreshDetail(experiment);
    }
    const stale = experiments.filter(e => {
      const known = this._best.get(e.id);
      return (
        !this._expanded.has(e.id) && (!known || !isTerminal(known.state) || known.state !== e.state)
      );
    });
    for (const experiment of stale.slice(0, this._maxTrialFetches)) {
      await this.refreshTrials(experiment);
    }
  }

  /**
   * Fetches an opened experiment's trials, and the searcher-metric curve of each trial that
   * trained on since its curve was fetched.
   */
  async refreshDetail(experiment: IExperiment): Promise<void> {
    const trials = await this.refreshTrials(experiment);
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

  /** Fetches an experiment's trials (when expanded, or for its best metric). */
  async refreshTrials(experiment: IExperiment): Promise<readonly ITrial[]> {
    const trials = await this.client.listTrials(experiment.id);
    this._trials.set(experiment.id, trials);
    this._best.set(experiment.id, {
      state: experiment.state,
      value: bestMetric(trials, experiment.smaller_is_better)
    });
    this._changed.emit();
    return trials;
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

  private _user: string | null = null;
  private _scope: Scope = 'mine';
  private _query = '';
  private _loaded = false;
  private _error: string | null = null;
  private _experiments: IExperiment[] = [];
  private readonly _best = new Map<number, { state: string; value: number | null }>();
  private readonly _trials = new Map<number, ITrial[]>();
  private readonly _expanded = new Set<number>();
  private readonly _curves = new Map<number, { steps: number; state: string; points: IPoint[] }>();
  private readonly _limit: number;
  private readonly _maxTrialFetches: number;
  private readonly _changed = new Signal<this, void>(this);
}
