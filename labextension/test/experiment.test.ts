import { DetHubClient } from '../src/api/client';
import { ExperimentModel, hasRungs } from '../src/model/experiment';
import { FakeServer, json } from './fakeServer';
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

function setUp(subject: ReturnType<typeof experiment>): FakeServer {
  const id = subject.id;
  return new FakeServer()
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
