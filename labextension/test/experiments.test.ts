import { DetHubClient } from '../src/api/client';
import {
  bestMetric,
  ExperimentListModel,
  formatMetric,
  matchesQuery
} from '../src/model/experiments';
import { FakeServer, json, LiveEventStream, until } from './fakeServer';
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
  const metricRows = [
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
  ];

  function setUp(options: { detailInterval?: number } = {}): {
    server: FakeServer;
    stream: LiveEventStream;
    model: ExperimentListModel;
  } {
    const stream = new LiveEventStream();
    const server = new FakeServer()
      .on('GET', 'api/v1/experiments/stream', stream.respond)
      .on('GET', /^api\/v1\/experiments\/\d+\/trials$/, request => {
        const id = Number(request.path.split('/')[3]);
        return json({
          trials: [trial({ id: id * 10, experiment_id: id, searcher_metric_value: id / 10 })]
        });
      })
      .on('GET', /^api\/v1\/trials\/\d+\/metrics$/, () => json({ metrics: metricRows }));
    const model = new ExperimentListModel(new DetHubClient({ serverSettings: server.settings() }), {
      retryDelay: 1,
      maxDelay: 5,
      detailInterval: options.detailInterval ?? 0
    });
    return { server, stream, model };
  }

  /** The stream requests' query parameters, one object per connection. */
  function connections(server: FakeServer): Record<string, string>[] {
    return server
      .to('api/v1/experiments/stream')
      .map(r => Object.fromEntries([...r.url.searchParams].filter(([k]) => !/^\d+$/.test(k))));
  }

  it("follows the user's own experiments, or everyone's, and never polls the list", async () => {
    const { server, stream, model } = setUp();
    model.user = 'alice';
    model.start();
    await until(() => stream.open);
    stream.send('snapshot', { experiments: [experiment({ id: 1 })], total: 1 });
    await until(() => model.loaded);
    expect(model.live).toBe(true);
    expect(model.experiments.map(e => e.id)).toEqual([1]);

    // A new scope is a new stream: the old one is closed, the list starts again.
    model.scope = 'all';
    expect(model.loaded).toBe(false);
    await until(() => stream.connections === 2 && stream.open);
    expect(stream.cancelled).toBe(1);
    expect(connections(server)).toEqual([
      { owner: 'alice', archived: 'false', limit: '100' },
      { archived: 'false', limit: '100' }
    ]);
    await new Promise(resolve => setTimeout(resolve, 50));
    expect(server.to('api/v1/experiments')).toEqual([]);
    model.stop();
    expect(model.live).toBe(false);
    await until(() => stream.cancelled === 2);
  });

  it('puts each experiment in place as it comes, and drops those removed', async () => {
    const { stream, model } = setUp();
    model.start();
    await until(() => stream.open);
    stream.send('snapshot', {
      experiments: [experiment({ id: 5 }), experiment({ id: 2, state: 'COMPLETED' })],
      total: 2
    });
    await until(() => model.loaded);
    let changes = 0;
    model.changed.connect(() => (changes += 1));

    stream.send('experiment', experiment({ id: 7, state: 'ACTIVE', best_searcher_metric: 0.3 }));
    stream.send('experiment', experiment({ id: 5, state: 'PAUSED' }));
    // An old one brought back (unarchived) takes its place by id.
    stream.send('experiment', experiment({ id: 3, state: 'COMPLETED' }));
    await until(() => model.experiments.length === 4);
    await until(() => model.experiments.find(e => e.id === 5)?.state === 'PAUSED');
    expect(model.experiments.map(e => e.id)).toEqual([7, 5, 3, 2]);
    expect(model.best(7)).toBe(0.3);
    expect(changes).toBeGreaterThanOrEqual(3);

    stream.send('removed', { id: 5 });
    await until(() => model.experiments.length === 3);
    expect(model.experiments.map(e => e.id)).toEqual([7, 3, 2]);
    model.stop();
  });

  it('takes a fresh snapshot when the master asks to reconnect, or the stream breaks', async () => {
    const { server, stream, model } = setUp();
    model.start();
    await until(() => stream.open);
    stream.send('snapshot', { experiments: [experiment({ id: 1 })], total: 1 });
    await until(() => model.loaded);

    stream.send('reconnect', {});
    stream.close();
    await until(() => stream.connections === 2 && stream.open);
    stream.send('snapshot', { experiments: [experiment({ id: 2 })], total: 1 });
    await until(() => model.experiments[0]?.id === 2);

    stream.close();
    await until(() => stream.connections === 3 && stream.open);
    stream.send('snapshot', { experiments: [experiment({ id: 3 })], total: 1 });
    await until(() => model.experiments[0]?.id === 3);
    expect(model.error).toBeNull();
    expect(server.to('api/v1/experiments')).toEqual([]);
    model.stop();
  });

  it('tries again, with a growing delay, while the master cannot be reached', async () => {
    const stream = new LiveEventStream();
    let failures = 3;
    const times: number[] = [];
    const server = new FakeServer().on('GET', 'api/v1/experiments/stream', () => {
      times.push(Date.now());
      return failures-- > 0
        ? json({ error: 'the master cannot be reached', details: [] }, 502)
        : stream.respond();
    });
    const model = new ExperimentListModel(new DetHubClient({ serverSettings: server.settings() }), {
      retryDelay: 2,
      maxDelay: 20
    });
    const errors: (string | null)[] = [];
    model.changed.connect(() => errors.push(model.error));
    model.start();
    await until(() => stream.open, 3000);
    expect(errors).toContain('the master cannot be reached');
    expect(model.error).toBe('the master cannot be reached');
    stream.send('snapshot', { experiments: [], total: 0 });
    await until(() => model.loaded);
    expect(model.error).toBeNull();
    expect(server.to('api/v1/experiments/stream')).toHaveLength(4);
    // Waits of 4, 8 and 16 ms (2 ms doubled per failure in a row, at most 20).
    expect(times[3] - times[0]).toBeGreaterThanOrEqual(4 + 8 + 16 - 3);
    model.stop();
  });

  it('stops, keeping the error, when the master refuses the stream for good', async () => {
    const server = new FakeServer().on('GET', 'api/v1/experiments/stream', () =>
      json({ error: "state: 'NOPE' is not an experiment state", details: [] }, 400)
    );
    const model = new ExperimentListModel(new DetHubClient({ serverSettings: server.settings() }), {
      retryDelay: 1
    });
    model.start();
    await until(() => !model.live);
    expect(model.error).toBe("state: 'NOPE' is not an experiment state");
    expect(server.requests).toHaveLength(1);
  });

  it('ignores what a stopped stream still delivers', async () => {
    const { stream, model } = setUp();
    model.start();
    await until(() => stream.open);
    stream.send('snapshot', { experiments: [experiment({ id: 1 })], total: 1 });
    await until(() => model.loaded);
    // Written just before the list is closed, read after.
    stream.send('experiment', experiment({ id: 9 }));
    model.stop();
    await new Promise(resolve => setTimeout(resolve, 20));
    expect(model.experiments.map(e => e.id)).toEqual([1]);
  });

  it("opens a row on its trials and each trial's searcher-metric curve", async () => {
    const { server, stream, model } = setUp();
    model.start();
    await until(() => stream.open);
    stream.send('snapshot', { experiments: [experiment({ id: 3 })], total: 1 });
    await until(() => model.loaded);
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
    // Without the master's best value, the trials' best is shown.
    expect(model.best(3)).toBe(0.3);

    // A change of the opened experiment fetches its trials again; unchanged trials keep
    // their curve.
    stream.send('experiment', experiment({ id: 3, progress: 0.5 }));
    await until(() => server.to('api/v1/experiments/3/trials').length === 2);
    expect(server.to('api/v1/trials/30/metrics')).toHaveLength(1);
    await model.toggle(3);
    expect(model.isExpanded(3)).toBe(false);
    model.stop();
  });

  it("fetches an opened row's trials at most once per interval while it changes", async () => {
    const { server, stream, model } = setUp({ detailInterval: 150 });
    model.start();
    await until(() => stream.open);
    stream.send('snapshot', { experiments: [experiment({ id: 4 })], total: 1 });
    await until(() => model.loaded);
    await model.toggle(4);
    const fetches = (): number => server.to('api/v1/experiments/4/trials').length;
    expect(fetches()).toBe(1);
    for (let i = 1; i <= 5; i++) {
      stream.send('experiment', experiment({ id: 4, progress: i / 10 }));
    }
    await until(() => model.experiments[0].progress === 0.5);
    expect(fetches()).toBe(1);
    await until(() => fetches() === 2, 1000);
    await new Promise(resolve => setTimeout(resolve, 200));
    expect(fetches()).toBe(2);
    model.stop();
  });

  it('filters by the search box and tells when it changed', async () => {
    const { stream, model } = setUp();
    model.start();
    await until(() => stream.open);
    stream.send('snapshot', {
      experiments: [experiment({ id: 1, name: 'cifar' }), experiment({ id: 2, name: 'mnist' })],
      total: 2
    });
    await until(() => model.loaded);
    let changes = 0;
    model.changed.connect(() => (changes += 1));
    model.query = 'mni';
    expect(model.shown.map(e => e.id)).toEqual([2]);
    expect(changes).toBe(1);
    model.stop();
  });

  it('shows an action’s result at once', async () => {
    const { stream, model } = setUp();
    model.start();
    await until(() => stream.open);
    stream.send('snapshot', { experiments: [experiment({ id: 1, state: 'ACTIVE' })], total: 1 });
    await until(() => model.loaded);
    model.update(experiment({ id: 1, state: 'STOPPING_CANCELED' }));
    expect(model.experiments[0].state).toBe('STOPPING_CANCELED');
    model.stop();
  });
});
