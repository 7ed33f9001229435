/**
 * The shapes of the det_hub master's REST API (docs/rest-api.md), as the panel reads them.
 * Each interface mirrors an answer model of det_hub/service/wire, field for field:
 * tests/service/test_wire_schema.py checks that they have the same fields, optional where the
 * master may leave one out. A field marked optional that the master always sends is one older
 * masters do not.
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

/** The Unix account a user's tasks run as; the names may be unknown. */
export interface IAgentUserGroup {
  agent_uid: number;
  agent_gid: number;
  agent_user: string | null;
  agent_group: string | null;
}

export interface IUser {
  id: number;
  username: string;
  admin: boolean;
  active: boolean;
  created_at: string;
  agent_user_group: IAgentUserGroup | null;
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
  weight: number;
  job_id?: string;
  seed: number;
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
  request_id: string;
  state: RunState;
  /** Where an active trial's process is; WAITING: checkpointed at its ASHA rung. */
  run_state: 'QUEUED' | 'STARTING' | 'RUNNING' | 'WAITING' | null;
  hparams: Record<string, unknown>;
  seed: number;
  restarts: number;
  /** Starts of its process so far: the first, and every restart or resume. */
  run_id: number;
  created_at: string;
  ended_at: string | null;
  steps_completed: number;
  progress: number | null;
  latest_checkpoint: string | null;
  best_validation: IValidation | null;
  latest_validation: IValidation | null;
  searcher_metric_value: number | null;
}

/** What a checkpoint was trained from (a checkpoint read alone). */
export interface ICheckpointTraining {
  experiment_config: Record<string, unknown>;
  searcher_metric: string;
  hparams: Record<string, unknown>;
  trial_seed: number | null;
  validation_metrics: Record<string, number | null> | null;
  model_definition: string;
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
  training?: ICheckpointTraining;
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
  id: number;
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
  isolation_warning: string | null;
  slots: ISlot[];
}

export interface IResourcePool {
  name: string;
  description: string;
  type: string | null;
  agents: number;
  slots_total: number;
  slots_used: number;
  slot_type: string | null;
  scheduler: string;
  preemption: boolean;
  fitting_policy: string | null;
  preemption_timeout: number;
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
  allocations: number;
  preemptible: boolean;
  submitted: string;
  queued_at: string | null;
  experiment_id: number | null;
  task_id: number | null;
  /** Why its allocations wait where the resource manager says (Slurm's pending reason). */
  reason?: string | null;
}

/**
 * An allocation holding or waiting for slots, in the cluster stream: whose job it is, and for
 * which trial or task (a slot's `allocation_id` names it).
 */
export interface IClusterAllocation {
  id: string;
  job_id: string;
  owner: string;
  experiment_id: number | null;
  trial_id: number | null;
  task_id: number | null;
  state: 'QUEUED' | 'STARTING' | 'RUNNING';
  slots: number;
}

/**
 * `event: snapshot` of the cluster stream (`/cluster/stream`): the agents, pools and queue as
 * their own endpoints show them, and the open allocations.
 */
export interface IClusterState {
  agents: IAgent[];
  resource_pools: IResourcePool[];
  jobs: IJob[];
  allocations: IClusterAllocation[];
}

/** One line of a trial's log (newline-delimited JSON of `/trials/{id}/logs`). */
export interface ILogLine {
  id: number;
  trial_id: number;
  allocation_id: string | null;
  timestamp: string;
  rank: number | null;
  stdtype: string;
  message: string;
}

/** A trial in the `state` events of the metric stream. */
export interface IStreamTrial {
  id: number;
  state: RunState;
  /** The state as the trial list shows it (waiting at an ASHA rung, say). */
  shown_state: string;
  steps_completed: number;
  progress: number | null;
  hparams: Record<string, unknown>;
  /** The trial's best value of the searcher metric so far. */
  searcher_metric_value: number | null;
  restarts: number;
  latest_checkpoint: string | null;
}

/** `event: state` of the metric stream. */
export interface IStreamState {
  experiment_id: number;
  state: RunState;
  /** The state as the experiment list shows it. */
  shown_state: string;
  progress: number | null;
  trials: IStreamTrial[];
}

/**
 * `event: rolled_back` of the metric stream: a new run of the trial trains on from
 * `steps_completed`, and the rows it reported past that no longer count.
 */
export interface IRolledBack {
  trial_id: number;
  run_id: number;
  steps_completed: number;
}

/** An event of an experiment's metric stream, as the panel gets it. */
export type ExperimentEvent =
  | { kind: 'metrics'; row: IMetricRow }
  | { kind: 'state'; state: IStreamState }
  | { kind: 'rolled_back'; rolledBack: IRolledBack };

/**
 * An event of the cluster stream, as the panel gets it: the whole cluster first, then the
 * parts of it that changed, each whole.
 */
export type ClusterEvent =
  { kind: 'snapshot'; state: IClusterState } | { kind: 'cluster'; changed: Partial<IClusterState> };

/** An event of the experiment list stream (`/experiments/stream`), as the panel gets it. */
export type ExperimentListEvent =
  | { kind: 'snapshot'; experiments: IExperiment[]; total: number }
  | { kind: 'experiment'; experiment: IExperiment }
  | { kind: 'removed'; id: number };

/** A trial's result at a rung; `metric` null for a trial that exited without one. */
export interface IRungResult {
  trial_id: number | null;
  metric: number | null;
  promoted: boolean;
}

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
  /** Their results, in the same order. */
  results: IRungResult[];
  /** Trials training towards this rung now. */
  training: number[];
}

export interface IBracket {
  index: number;
  num_rungs: number;
  max_trials: number;
  max_concurrent_trials: number;
  trials_created: number;
  trials_invalid: number;
  rungs: IRung[];
}

/** The rung table of `adaptive_asha` and `async_halving`. */
export interface IRungTable {
  name: string;
  divisor: number;
  stop_once: boolean;
  smaller_is_better: boolean;
  max_length: number;
  brackets: IBracket[];
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
  rungs: IRungTable | null;
}

/** A model of the model registry. */
export interface IModel {
  id: number;
  name: string;
  description: string;
  labels: string[];
  notes: string;
  metadata: Record<string, unknown>;
  owner: string;
  creation_time: string;
  last_updated_time: string;
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
  /** Null once the checkpoint is gone. */
  checkpoint: ICheckpoint | null;
  name: string;
  comment: string;
  notes: string;
  labels: string[];
  metadata: Record<string, unknown>;
  owner: string;
  creation_time: string;
  last_updated_time: string;
}

/** The actions on an experiment, each a `POST /experiments/{id}/<action>`. */
export type ExperimentAction = 'pause' | 'activate' | 'kill' | 'archive' | 'unarchive';

/** One hyperparameter against the searcher metric, for the trials that have one. */
export interface ISearchScatter {
  /** The hyperparameter's dotted name. */
  name: string;
  /** Whether its space is log: drawn on a log axis. */
  log: boolean;
  x: (number | string)[];
  y: number[];
  trial_ids: number[];
}

/** `GET /experiments/{id}/search-view`: a search at a glance. */
export interface ISearchView {
  metric: string;
  smaller_is_better: boolean;
  /** A Plotly parcoords trace; its `customdata` holds each line's trial id. */
  parallel: Record<string, unknown>;
  scatters: ISearchScatter[];
}

/** One hyperparameter's share of the variance of the searcher metric. */
export interface IParameterImportance {
  name: string;
  importance: number;
}

/** `GET /experiments/{id}/hyperparameter-importance` (optuna's fANOVA, on the master). */
export interface IHyperparameterImportance {
  metric: string;
  /** The trials with a searcher metric that the shares are from. */
  trials: number;
  /** Largest first; empty unless two such trials differ in their metric and a hyperparameter. */
  importance: IParameterImportance[];
}
