import { DetHubClient } from '../src/api/client';
import { COMPARE_MAX, CompareModel, comparedIds, CompareSelection } from '../src/model/compare';
import { bestTrial } from '../src/model/experiments';
import { PALETTE } from '../src/model/trialColours';
import { FakeServer, json } from './fakeServer';
import { experiment, row, trial } from './fixtures';

describe('bestTrial', () => {
  it('is the trial with the best metric, the first of equals, none without a metric', () => {
    const trials = [
      trial({ id: 1, searcher_metric_value: 0.3 }),
      trial({ id: 2, searcher_metric_value: null }),
      trial({ id: 3, searcher_metric_value: 0.1 }),
      trial({ id: 4, searcher_metric_value: 0.1 }),
      trial({ id: 5, searcher_metric_value: 0.7 })
    ];
    expect(bestTrial(trials, true)?.id).toBe(3);
    expect(bestTrial(trials, false)?.id).toBe(5);
    expect(bestTrial([trial({ searcher_metric_value: null })], true)).toBeNull();
  });
});

describe('comparedIds', () => {
  it('keeps each id once, in order', () => {
    expect(comparedIds([4, 2, 4])).toEqual([4, 2]);
  });

  it('refuses fewer than two or more than eight, saying how many were ticked', () => {
    expect(() => comparedIds([3, 3])).toThrow('Tick from 2 to 8 experiments to compare, not 1.');
    expect(() => comparedIds([1, 2, 3, 4, 5, 6, 7, 8, 9])).toThrow('not 9');
  });
});

describe('CompareSelection', () => {
  it('ticks up to eight experiments, and is ready to compare from two', () => {
    const selection = new CompareSelection();
    let changes = 0;
    selection.changed.connect(() => (changes += 1));
    expect(selection.set(5, true)).toBe(true);
    expect(selection.ready).toBe(false);
    selection.set(2, true);
    expect(selection.ids).toEqual([2, 5]);
    expect(selection.ready).toBe(true);
    for (let id = 10; selection.ids.length < COMPARE_MAX; id++) {
      selection.set(id, true);
    }
    expect(selection.full).toBe(true);
    expect(selection.set(99, true)).toBe(false);
    expect(selection.has(99)).toBe(false);
    selection.set(5, false);
    expect(selection.has(5)).toBe(false);
    expect(selection.full).toBe(false);
    const before = changes;
    selection.clear();
    expect(selection.ids).toEqual([]);
    expect(changes).toBe(before + 1);
  });
});

describe('CompareModel', () => {
  /** Experiment 1 (smaller is better) and 2 (larger is better), and 3 with no metric yet. */
  function server(): FakeServer {
    return new FakeServer()
      .on('GET', 'api/v1/experiments/1', () => json({ experiment: experiment({ id: 1 }) }))
      .on('GET', 'api/v1/experiments/1/trials', () =>
        json({
          trials: [
            trial({ id: 11, experiment_id: 1, searcher_metric_value: 0.4, hparams: { lr: 0.1 } }),
            trial({ id: 12, experiment_id: 1, searcher_metric_value: 0.2, hparams: { lr: 0.01 } })
          ]
        })
      )
      .on('GET', 'api/v1/experiments/2', () =>
        json({
          experiment: experiment({
            id: 2,
            searcher_metric: 'accuracy',
            smaller_is_better: false
          })
        })
      )
      .on('GET', 'api/v1/experiments/2/trials', () =>
        json({
          trials: [
            trial({ id: 21, experiment_id: 2, searcher_metric_value: 0.9, hparams: { lr: 0.5 } }),
            trial({ id: 22, experiment_id: 2, searcher_metric_value: 0.7, hparams: { lr: 0.3 } })
          ]
        })
      )
      .on('GET', 'api/v1/experiments/3', () => json({ experiment: experiment({ id: 3 }) }))
      .on('GET', 'api/v1/experiments/3/trials', () =>
        json({ trials: [trial({ id: 31, experiment_id: 3, searcher_metric_value: null })] })
      )
      .on('GET', /^api\/v1\/trials\/\d+\/metrics$/, request => {
        const id = Number(request.path.split('/')[3]);
        return json({
          metrics: [row(id * 10, id, 5, { loss: id / 100 }), row(id * 10 + 1, id, 10, { loss: 0 })]
        });
      });
  }

  function client(fake: FakeServer): DetHubClient {
    return new DetHubClient({ serverSettings: fake.settings() });
  }

  it("draws each experiment's best trial, in the experiment's colour", async () => {
    const fake = server();
    const model = new CompareModel(client(fake), [2, 1, 3]);
    await model.load();
    expect(model.error).toBeNull();
    expect(model.loaded).toBe(true);
    expect(model.compared.map(c => [c.experiment.id, c.best?.id ?? null, c.colour])).toEqual([
      [2, 21, PALETTE[0]],
      [1, 12, PALETTE[1]],
      [3, null, PALETTE[2]]
    ]);
    // The metrics of the best trials only.
    const asked = fake.requests.map(r => r.path).filter(p => p.endsWith('/metrics'));
    expect(asked.sort()).toEqual(['api/v1/trials/12/metrics', 'api/v1/trials/21/metrics']);
    expect(model.traces('loss').map(t => [t.name, t.colour, t.x])).toEqual([
      ['experiment 1 trial 12 training', PALETTE[1], [5, 10]],
      ['experiment 2 trial 21 training', PALETTE[0], [5, 10]]
    ]);
    expect(model.bestTrials.map(t => t.id)).toEqual([21, 12]);
    model.dispose();
  });

  it('says which experiment could not be loaded', async () => {
    const fake = server().on('GET', 'api/v1/experiments/4', () =>
      json({ error: 'experiment 4 not found', details: [] }, 404)
    );
    const model = new CompareModel(client(fake), [1, 4]);
    await model.load();
    expect(model.error).toBe('Could not load experiment 4 to compare: experiment 4 not found');
    expect(model.compared).toEqual([]);
    model.dispose();
  });

  it('says whose metrics could not be loaded', async () => {
    const fake = new FakeServer()
      .on('GET', /^api\/v1\/experiments\/[12]$/, request =>
        json({ experiment: experiment({ id: Number(request.path.split('/')[3]) }) })
      )
      .on('GET', /^api\/v1\/experiments\/[12]\/trials$/, request => {
        const eid = Number(request.path.split('/')[3]);
        return json({ trials: [trial({ id: eid * 10, searcher_metric_value: 0.1 })] });
      })
      .on('GET', 'api/v1/trials/10/metrics', () => json({ metrics: [] }))
      .on('GET', 'api/v1/trials/20/metrics', () =>
        json({ error: 'the store is unavailable', details: [] }, 503)
      );
    const model = new CompareModel(client(fake), [1, 2]);
    await model.load();
    expect(model.error).toBe(
      'Could not load the metrics of trial 20 (the best of experiment 2): the store is unavailable'
    );
    model.dispose();
  });

  it('cannot be made for fewer than two experiments', () => {
    expect(() => new CompareModel(client(server()), [1])).toThrow('not 1');
  });
});
