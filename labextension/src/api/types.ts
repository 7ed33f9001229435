/**
 * The shapes of the det_hub master's REST API (docs/rest-api.md), as the panel reads them.
 * Only the fields the panel uses are typed; the master may send more.
 */

/**
 * Experiment and trial states; the last three are terminal. The master keeps `ACTIVE` and shows
 * what an active one is doing in its place: `QUEUED`, `PULLING`, `STARTING` or `RUNNING`.
 */
export type RunState =
  | 'ACTIVE'
  | 'QUEUED'
  | 'PULLING'
  | 'STARTING'
  | 'RUNNING'
  | 'PAUSED'
  | 'STOPPING_COMPLETED'
  | 'STOPPING_CANCELED'
  | 'STOPPING_ERROR'
  | 'COMPLETED'
  | 'CANCELED'
  | 'ERROR';

export const ACTIVE_STATES: ReadonlySet<string> = new Set([
  'ACTIVE',
  'QUEUED',
  'PULLING',
  'STARTING',
  'RUNNING'
]);

/** Whether an experiment or trial in `state` is active (running, starting or queued). */
export function isActive(state: string): boolean {
  return ACTIVE_STATES.has(state);
}

export const TERMINAL_STATES: ReadonlySet<string> = new Set(['COMPLETED', 'CANCELED', 'ERROR']);

/** Whether an experiment or trial in `state` can change no more (short of `continue`). */
export function isTerminal(state: string): boolean {
  return TERMINAL_STATES.has(state);
}

export interface IUser {
  id: number;
  username: string;
  admin: boolean;
}

/** `<base_url>det-hub/config`, from the server extension. */
export interface IDetHubConfig {
  master: string | null;
  user: IUser | null;
  version: string;
  problem: string | null;
}

export interface IExperiment {
  id: number;
  name: string;
  description: string;
  owner: string;
  state: RunState;
  archived: boolean;
  progress: number | null;
  created_at: string;
  ended_at: string | null;
  config: Record<string, unknown>;
  searcher_metric: string;
  smaller_is_better: boolean;
  /** The best searcher-metric value of its trials; null before any, absent from old masters. */
  best_searcher_metric?: number | null;
  num_trials: number;
  resource_pool: string;
  priority: number;
  job_id?: string;
  labels: string[];
  forked_from: number | null;
}

export interface IValidation {
  steps_completed: number;
  metrics: Record<string, number>;
}

export interface ITrial {
  id: number;
  experiment_id: number;
  state: RunState;
  run_state: 'QUEUED' | 'STARTING' | 'RUNNING' | null;
  hparams: Record<string, unknown>;
  seed: number;
  restarts: number;
  created_at: string;
  ended_at: string | null;
  steps_completed: number;
  progress: number | null;
  latest_checkpoint: string | null;
  best_validation: IValidation | null;
  searcher_metric_value: number | null;
}

export interface ICheckpoint {
  uuid: string;
  trial_id: number;
  experiment_id: number;
  allocation_id: string | null;
  state: 'ACTIVE' | 'COMPLETED' | 'DELETED';
  steps_completed: number;
  report_time: string | null;
  resources: Record<string, number>;
  metadata: Record<string, unknown>;
  size: number | null;
  storage: Record<string, unknown>;
}

/** One metric report of a trial (`/trials/{id}/metrics`, and the metric stream's rows). */
export interface IMetricRow {
  id: number;
  trial_id?: number;
  group: string;
  steps_completed: number;
  report_time: string;
  metrics: Record<string, number | null>;
}

export interface ISlot {
  id: string;
  type: 'cpu' | 'cuda';
  device: string | number | null;
  cpus?: number[] | null;
  description: string;
  allocation_id: string | null;
}

export interface IAgent {
  id: string;
  type: string;
  resource_pool: string;
  enabled: boolean;
  address: string;
  connected: boolean;
  slots: ISlot[];
}

export interface IResourcePool {
  name: string;
  description: string;
  slots_total: number;
  slots_used: number;
  slot_type: string | null;
  scheduler: string;
  default: boolean;
}

export interface IJob {
  job_id: string;
  type: string;
  name: string;
  owner: string;
  resource_pool: string;
  queue_position: number | null;
  priority: number;
  weight: number;
  state: 'QUEUED' | 'SCHEDULED' | 'SCHEDULED_PARTIALLY';
  slots_requested: number;
  slots_allocated: number;
  preemptible: boolean;
  experiment_id: number | null;
  task_id: number | null;
}

/** One line of a trial's log (newline-delimited JSON of `/trials/{id}/logs`). */
export interface ILogLine {
  id: number;
  trial_id: number;
  timestamp: string;
  rank: number | null;
  stdtype: string;
  message: string;
}

/** `event: state` of the metric stream. */
export interface IStreamState {
  experiment_id: number;
  state: RunState;
  progress: number | null;
  trials: { id: number; state: RunState; steps_completed: number; progress: number | null }[];
}

/** An event of an experiment's metric stream, as the panel gets it. */
export type ExperimentEvent =
  { kind: 'metrics'; row: IMetricRow } | { kind: 'state'; state: IStreamState };

/** An event of the experiment list stream (`/experiments/stream`), as the panel gets it. */
export type ExperimentListEvent =
  | { kind: 'snapshot'; experiments: IExperiment[]; total: number }
  | { kind: 'experiment'; experiment: IExperiment }
  | { kind: 'removed'; id: number };

/** One rung of an ASHA bracket (`/experiments/{id}/searcher`). */
export interface IRung {
  index: number;
  /** The training length a trial reaches at this rung, in the searcher's unit. */
  length: number;
  /** How many trials reported a result here. */
  reported: number;
  /** The best result here, in the metric's own sign; null before any finite one. */
  best_metric: number | null;
  /** How many results were promoted (or, with `stop_once`, continued) past this rung. */
  promoted: number;
  /** The trials with a result here, best first. */
  trial_ids: number[];
  /** Trials training towards this rung now. */
  training: number[];
}

export interface IBracket {
  index: number;
  num_rungs: number;
  max_trials: number;
  trials_created: number;
  rungs: IRung[];
}

/** The search at a glance (`GET /experiments/{id}/searcher`). */
export interface ISearcherView {
  name: string;
  metric: string;
  smaller_is_better: boolean;
  progress: number | null;
  trials_created: number;
  shutdown: boolean;
  waiting_trials: number[];
  /** The rung table of `adaptive_asha` and `async_halving`; null for other searches. */
  rungs: {
    name: string;
    divisor: number;
    stop_once: boolean;
    max_length: number;
    brackets: IBracket[];
  } | null;
}

/** A model of the model registry. */
export interface IModel {
  id: number;
  name: string;
  description: string;
  owner: string;
  archived: boolean;
  num_versions: number;
}

/** A checkpoint registered under a model (`/models/{name}/versions`). */
export interface IModelVersion {
  id: number;
  model_id: number;
  model_name: string;
  version: number;
  checkpoint_uuid: string;
  owner: string;
}

/** The actions on an experiment, each a `POST /experiments/{id}/<action>`. */
export type ExperimentAction = 'pause' | 'activate' | 'kill' | 'archive' | 'unarchive';
