import { DetHubClient } from '../src/api/client';
import {
  bestMetric,
  ExperimentListModel,
  formatMetric,
  matchesQuery
} from '../src/model/experiments';
import { FakeServer, json } from './fakeServer';
import { experiment, trial } from './fixtures';

describe('bestMetric', () => {
  const trials = [
    trial({ id: 1, searcher_metric_value: 0.3 }),
    trial({ id: 2, searcher_metric_value: null }),
    trial({ id: 3, searcher_metric_value: 0.1 }),
    trial({ id: 4, searcher_metric_value: 0.7 })
  ];

  it('is the smallest value, or the largest when bigger is better', () => {
    expect(bestMetric(trials, true)).toBe(0.1);
    expect(bestMetric(trials, false)).toBe(0.7);
  });

  it('is null before any trial reported', () => {
    expect(bestMetric([trial({ searcher_metric_value: null })], true)).toBeNull();
    expect(bestMetric([], true)).toBeNull();
  });
});

describe('matchesQuery', () => {
  const e = experiment({
    id: 12,
    name: 'MNIST adaptive',
    owner: 'bob',
    state: 'PAUSED',
    labels: ['vision']
  });

  it.each([
    ['', true],
    ['mnist', true],
    ['adaptive mnist', true],
    ['paused', true],
    ['bob', true],
    ['vision', true],
    ['#12', true],
    ['12', true],
    ['13', false],
    ['mnist alice', false]
  ])('%p matches: %p', (query, expected) => {
    expect(matchesQuery(e, query)).toBe(expected);
  });
});

describe('formatMetric', () => {
  it.each([
    [null, '–'],
    [0.123456, '0.1235'],
    [12, '12'],
    [0.00001234, '1.234e-5'],
    [123456, '1.235e+5'],
    [Number.NaN, '–']
  ])('%p is %p', (value, text) => {
    expect(formatMetric(value)).toBe(text);
  });
});

describe('ExperimentListModel', () => {
  function setUp(experiments: () => ReturnType<typeof experiment>[]): {
    server: FakeServer;
    model: ExperimentListModel;
  } {
    const server = new FakeServer()
      .on('GET', 'api/v1/experiments', () => json({ experiments: experiments() }))
      .on('GET', /^api\/v1\/experiments\/\d+\/trials$/, request => {
        const id = Number(request.path.split('/')[3]);
        return json({
          trials: [trial({ id: id * 10, experiment_id: id, searcher_metric_value: id / 10 })]
        });
      })
      .on('GET', /^api\/v1\/trials\/\d+\/metrics$/, () =>
        json({
          metrics: [
            {
              id: 1,
              group: 'validation',
              steps_completed: 5,
              report_time: '',
              metrics: { validation_loss: 0.5 }
            },
            {
              id: 2,
              group: 'validation',
              steps_completed: 10,
              report_time: '',
              metrics: { validation_loss: 0.2 }
            }
          ]
        })
      );
    const model = new ExperimentListModel(new DetHubClient({ serverSettings: server.settings() }));
    return { server, model };
  }

  it("asks for the user's own experiments, or everyone's", async () => {
    const { server, model } = setUp(() => []);
    model.user = 'alice';
    await model.refresh();
    model.scope = 'all';
    await model.refresh();
    const owners = server.to('api/v1/experiments').map(r => r.url.searchParams.get('owner'));
    expect(owners).toEqual(['alice', null]);
    expect(model.loaded).toBe(true);
  });

  it('fetches trials of running experiments every time, of finished ones once', async () => {
    let listed = [
      experiment({ id: 1, state: 'ACTIVE' }),
      experiment({ id: 2, state: 'COMPLETED' })
    ];
    const { server, model } = setUp(() => listed);

    await model.refresh();
    await model.refresh();
    listed = [experiment({ id: 1, state: 'COMPLETED' }), experiment({ id: 2, state: 'COMPLETED' })];
    await model.refresh();
    await model.refresh();

    const fetched = server.requests
      .filter(r => r.path.endsWith('/trials'))
      .map(r => r.path.split('/')[3]);
    expect(fetched).toEqual(['1', '2', '1', '1']);
    expect(model.best(1)).toBe(0.1);
    expect(model.best(2)).toBe(0.2);
  });

  it('filters by the search box and tells when it changed', async () => {
    const { model } = setUp(() => [
      experiment({ id: 1, name: 'cifar' }),
      experiment({ id: 2, name: 'mnist' })
    ]);
    await model.refresh();
    let changes = 0;
    model.changed.connect(() => (changes += 1));
    model.query = 'mni';
    expect(model.shown.map(e => e.id)).toEqual([2]);
    expect(changes).toBe(1);
  });

  it("opens a row on its trials and each trial's searcher-metric curve", async () => {
    const { server, model } = setUp(() => [experiment({ id: 3 })]);
    await model.refresh();
    await model.toggle(3);

    expect(model.isExpanded(3)).toBe(true);
    expect(model.trials(3)?.map(t => t.id)).toEqual([30]);
    expect(model.curve(30)).toEqual([
      { x: 5, y: 0.5 },
      { x: 10, y: 0.2 }
    ]);
    const metrics = server.to('api/v1/trials/30/metrics')[0].url.searchParams;
    expect([metrics.get('group'), metrics.get('metric')]).toEqual([
      'validation',
      'validation_loss'
    ]);

    // Unchanged trials keep their curve: no second metrics request.
    await model.refresh();
    expect(server.to('api/v1/trials/30/metrics')).toHaveLength(1);
    await model.toggle(3);
    expect(model.isExpanded(3)).toBe(false);
  });

  it('keeps the error of a failed refresh and clears it on the next', async () => {
    let fail = true;
    const server = new FakeServer().on('GET', 'api/v1/experiments', () =>
      fail
        ? json({ error: 'the master cannot be reached', details: [] }, 502)
        : json({ experiments: [] })
    );
    const model = new ExperimentListModel(new DetHubClient({ serverSettings: server.settings() }));
    await expect(model.refresh()).rejects.toThrow('the master cannot be reached');
    expect(model.error).toBe('the master cannot be reached');
    fail = false;
    await model.refresh();
    expect(model.error).toBeNull();
  });

  it('shows an action’s result at once', async () => {
    const { model } = setUp(() => [experiment({ id: 1, state: 'ACTIVE' })]);
    await model.refresh();
    model.update(experiment({ id: 1, state: 'STOPPING_CANCELED' }));
    expect(model.experiments[0].state).toBe('STOPPING_CANCELED');
  });
});
