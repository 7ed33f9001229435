import { DetHubClient } from '../src/api/client';
import { ExperimentModel, hasRungs } from '../src/model/experiment';
import { FakeServer, json, sse, streamed } from './fakeServer';
import { experiment, trial } from './fixtures';

const RUNGS = {
  name: 'adaptive_asha',
  divisor: 4,
  stop_once: true,
  max_length: 64,
  brackets: [
    {
      index: 0,
      num_rungs: 2,
      max_trials: 4,
      trials_created: 4,
      rungs: [
        {
          index: 0,
          length: 16,
          reported: 4,
          best_metric: 0.1,
          promoted: 1,
          trial_ids: [3, 1, 2, 4],
          training: []
        },
        {
          index: 1,
          length: 64,
          reported: 0,
          best_metric: null,
          promoted: 0,
          trial_ids: [],
          training: [3]
        }
      ]
    }
  ]
};

function asha(id: number, name = 'adaptive_asha'): ReturnType<typeof experiment> {
  return experiment({ id, config: { searcher: { name, metric: 'validation_loss' } } });
}

function setUp(subject: ReturnType<typeof experiment>, search: unknown = null): FakeServer {
  const id = subject.id;
  return new FakeServer()
    .on('GET', `api/v1/experiments/${id}/search-view`, () => json({ search }))
    .on('GET', `api/v1/experiments/${id}`, () => json({ experiment: subject }))
    .on('GET', `api/v1/experiments/${id}/trials`, () => json({ trials: [trial()] }))
    .on('GET', `api/v1/experiments/${id}/checkpoints`, () => json({ checkpoints: [] }))
    .on('GET', `api/v1/experiments/${id}/searcher`, () =>
      json({
        searcher: {
          name: 'adaptive_asha',
          metric: 'validation_loss',
          smaller_is_better: true,
          progress: 0.4,
          trials_created: 4,
          shutdown: false,
          waiting_trials: [],
          rungs: RUNGS
        }
      })
    );
}

describe('hasRungs', () => {
  it.each([
    ['adaptive_asha', true],
    ['async_halving', true],
    ['single', false],
    ['random', false]
  ])('%p: %p', (name, expected) => {
    expect(hasRungs(asha(1, name))).toBe(expected);
  });

  it('is false for an experiment without a searcher in its config', () => {
    expect(hasRungs(experiment({ config: {} }))).toBe(false);
  });
});

describe('ExperimentModel', () => {
  it("fetches an ASHA search's rung table with the experiment", async () => {
    const server = setUp(asha(5));
    const model = new ExperimentModel(new DetHubClient({ serverSettings: server.settings() }), 5);
    await model.refresh();
    expect(model.searcher?.rungs?.brackets[0].rungs.map(r => [r.length, r.promoted])).toEqual([
      [16, 1],
      [64, 0]
    ]);
    expect(server.to('api/v1/experiments/5/searcher')).toHaveLength(1);
    model.dispose();
  });

  it('asks for no rungs of other searches', async () => {
    const server = setUp(asha(6, 'random'));
    const model = new ExperimentModel(new DetHubClient({ serverSettings: server.settings() }), 6);
    await model.refresh();
    expect(model.searcher).toBeNull();
    expect(server.to('api/v1/experiments/6/searcher')).toHaveLength(0);
    model.dispose();
  });

  it('keeps the versions registered from the view by checkpoint', () => {
    const model = new ExperimentModel(
      new DetHubClient({ serverSettings: new FakeServer().settings() }),
      1
    );
    let changes = 0;
    model.changed.connect(() => (changes += 1));
    const version = {
      id: 4,
      model_id: 1,
      model_name: 'mnist',
      version: 2,
      checkpoint_uuid: 'abc',
      checkpoint: null,
      name: '',
      comment: '',
      notes: '',
      labels: [],
      metadata: {},
      owner: 'alice',
      creation_time: '2026-11-22T10:00:00Z',
      last_updated_time: '2026-11-22T10:00:00Z'
    };
    model.noteRegistered(version);
    expect(model.registered('abc')).toEqual([version]);
    expect(model.registered('other')).toEqual([]);
    expect(changes).toBe(1);
    model.dispose();
  });
});

describe('ExperimentModel: the search view', () => {
  const SEARCH = {
    metric: 'validation_loss',
    smaller_is_better: true,
    parallel: { type: 'parcoords', dimensions: [], customdata: [7, 8] },
    scatters: [{ name: 'lr', log: true, x: [0.1, 0.01], y: [0.3, 0.2], trial_ids: [7, 8] }]
  };
  const IMPORTANCE = {
    metric: 'validation_loss',
    trials: 2,
    importance: [{ name: 'lr', importance: 1 }]
  };

  function withSearch(search: unknown, importance: () => Response): FakeServer {
    return setUp(asha(9, 'random'), search).on(
      'GET',
      'api/v1/experiments/9/hyperparameter-importance',
      importance
    );
  }

  function model(server: FakeServer): ExperimentModel {
    return new ExperimentModel(new DetHubClient({ serverSettings: server.settings() }), 9);
  }

  it('fetches the search view and its importance with the experiment', async () => {
    const server = withSearch(SEARCH, () => json(IMPORTANCE));
    const subject = model(server);
    await subject.refresh();
    expect(subject.search?.scatters.map(s => s.name)).toEqual(['lr']);
    expect(subject.importance?.importance).toEqual([{ name: 'lr', importance: 1 }]);
    expect(subject.importanceError).toBeNull();
    subject.dispose();
  });

  it('asks for no importance before there is a search view', async () => {
    const server = withSearch(null, () => json(IMPORTANCE));
    const subject = model(server);
    await subject.refresh();
    expect(subject.search).toBeNull();
    expect(subject.importance).toBeNull();
    expect(server.to('api/v1/experiments/9/hyperparameter-importance')).toHaveLength(0);
    subject.dispose();
  });

  it('says why the master gave no importance', async () => {
    const missing = 'hyperparameter importance needs scikit-learn on the master';
    const server = withSearch(SEARCH, () => json({ error: missing, details: [] }, 503));
    const subject = model(server);
    await subject.refresh();
    expect(subject.search).not.toBeNull();
    expect(subject.importance).toBeNull();
    expect(subject.importanceError).toContain(missing);
    subject.dispose();
  });

  it("fetches the view again when a trial's metric changes, not when it trains on", async () => {
    const trials = (value: number | null, steps: number) => [
      {
        id: 7,
        state: 'ACTIVE',
        shown_state: 'RUNNING',
        steps_completed: steps,
        progress: 0.5,
        hparams: { lr: 0.1 },
        searcher_metric_value: value,
        restarts: 0,
        latest_checkpoint: null
      }
    ];
    const state = (value: number | null, steps: number) => ({
      experiment_id: 9,
      state: 'ACTIVE',
      shown_state: 'RUNNING',
      progress: 0.5,
      trials: trials(value, steps)
    });
    let streams = 0;
    const server = withSearch(SEARCH, () => json(IMPORTANCE))
      .on('GET', 'api/v1/trials/7/metrics', () => json({ metrics: [] }))
      .on('GET', 'api/v1/experiments/9/metrics/stream', () => {
        streams += 1;
        if (streams > 1) {
          // Whatever comes after is no part of this test: the client backs off.
          return json({ error: 'the master is restarting', details: [] }, 503);
        }
        // Trains on (no new metric), then validates: one more look at the search.
        return streamed([
          sse('state', state(null, 20)) + sse('state', state(0.25, 30)),
          sse('reconnect', { after_id: 0 })
        ]);
      });
    const subject = model(server);
    await subject.start();
    const views = () => server.to('api/v1/experiments/9/search-view').length;
    for (let tries = 0; tries < 100 && views() < 2; tries++) {
      await new Promise(resolve => setTimeout(resolve, 10));
    }
    await new Promise(resolve => setTimeout(resolve, 50));
    subject.dispose();
    // Once with the experiment, once for the new metric.
    expect(views()).toBe(2);
  });
});
