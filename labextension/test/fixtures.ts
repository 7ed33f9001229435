/** Objects as the master's REST API answers them (docs/rest-api.md). */

import { IExperiment, IMetricRow, ITrial } from '../src/api/types';

export function experiment(fields: Partial<IExperiment> = {}): IExperiment {
  return {
    id: 1,
    name: 'mnist',
    description: '',
    owner: 'alice',
    state: 'ACTIVE',
    archived: false,
    progress: 0.25,
    created_at: '2026-11-22T10:00:00Z',
    ended_at: null,
    config: {},
    searcher_metric: 'validation_loss',
    smaller_is_better: true,
    num_trials: 1,
    resource_pool: 'default',
    priority: 42,
    weight: 1,
    job_id: 'exp-1',
    seed: 1234,
    labels: [],
    forked_from: null,
    ...fields
  };
}

export function trial(fields: Partial<ITrial> = {}): ITrial {
  return {
    id: 7,
    experiment_id: 1,
    request_id: '0f3c',
    state: 'ACTIVE',
    run_state: 'RUNNING',
    hparams: { lr: 0.1 },
    seed: 1,
    restarts: 0,
    run_id: 1,
    created_at: '2026-11-22T10:00:00Z',
    ended_at: null,
    steps_completed: 10,
    progress: 0.5,
    latest_checkpoint: null,
    best_validation: null,
    latest_validation: null,
    searcher_metric_value: null,
    ...fields
  };
}

export function row(
  id: number,
  trialId: number,
  step: number,
  metrics: Record<string, number>,
  group = 'training'
): IMetricRow {
  return {
    id,
    trial_id: trialId,
    group,
    steps_completed: step,
    report_time: '2026-11-22T10:00:00Z',
    metrics
  };
}
