import { DetHubClient, DetHubError, errorText } from '../src/api/client';
import { ExperimentEvent, ILogLine } from '../src/api/types';
import { BASE, FakeServer, json, sse, streamed } from './fakeServer';
import { experiment, row, trial } from './fixtures';

function client(server: FakeServer): DetHubClient {
  return new DetHubClient({ serverSettings: server.settings() });
}

describe('DetHubClient requests', () => {
  it('goes through the notebook server with its login only, never a master token', async () => {
    const server = new FakeServer().on('GET', 'api/v1/experiments', () =>
      json({
        experiments: [experiment({ id: 3 })],
        pagination: { offset: 0, limit: 100, total: 1 }
      })
    );
    const found = await client(server).listExperiments({
      owner: 'alice',
      archived: false,
      limit: 100
    });

    expect(found.map(e => e.id)).toEqual([3]);
    const [request] = server.requests;
    expect(request.method).toBe('GET');
    expect(request.url.href.startsWith(`${BASE}det-hub/api/v1/experiments?`)).toBe(true);
    expect(request.url.searchParams.get('owner')).toBe('alice');
    expect(request.url.searchParams.get('archived')).toBe('false');
    expect(request.url.searchParams.get('limit')).toBe('100');
    expect(request.headers.get('Authorization')).toBe('token notebook-token');
  });

  it('leaves out query parameters that are not given', async () => {
    const server = new FakeServer().on('GET', 'api/v1/experiments', () =>
      json({ experiments: [] })
    );
    await client(server).listExperiments();
    const params = [...server.requests[0].url.searchParams.keys()].filter(k => !/^\d+$/.test(k));
    expect(params).toEqual([]);
  });

  it('posts actions and patches priorities as the REST API says', async () => {
    const server = new FakeServer()
      .on('POST', 'api/v1/experiments/5/kill', () =>
        json({ experiment: experiment({ id: 5, state: 'STOPPING_CANCELED' }) })
      )
      .on('PATCH', 'api/v1/jobs/exp-5', request =>
        json({ job: { job_id: 'exp-5', ...JSON.parse(request.body ?? '{}') } })
      );
    const api = client(server);

    expect((await api.experimentAction(5, 'kill')).state).toBe('STOPPING_CANCELED');
    expect((await api.setExperimentPriority(5, 7)).priority).toBe(7);
    expect(server.requests.map(r => `${r.method} ${r.path}`)).toEqual([
      'POST api/v1/experiments/5/kill',
      'PATCH api/v1/jobs/exp-5'
    ]);
    expect(JSON.parse(server.requests[1].body ?? '')).toEqual({ priority: 7 });
    expect(server.requests[1].headers.get('Content-Type')).toBe('application/json');
  });

  it("turns the master's JSON errors into DetHubErrors with their details", async () => {
    const server = new FakeServer().on('POST', 'launch', () =>
      json(
        {
          error: 'the experiment config is not valid',
          details: [{ path: 'searcher.max_trials', message: 'must be >= 1' }]
        },
        400
      )
    );
    const error = await client(server)
      .createExperimentFromPath('exp/const.yaml', 'exp')
      .catch(e => e);

    expect(error).toBeInstanceOf(DetHubError);
    expect(error.status).toBe(400);
    expect(error.message).toBe('the experiment config is not valid');
    expect(errorText(error)).toBe(
      'the experiment config is not valid\nsearcher.max_trials: must be >= 1'
    );
    expect(JSON.parse(server.to('launch')[0].body ?? '')).toEqual({
      config_path: 'exp/const.yaml',
      context_dir: 'exp',
      activate: true
    });
  });

  it('names the status of an error that is not JSON', async () => {
    const server = new FakeServer().on(
      'GET',
      'api/v1/experiments/1',
      () => new Response('<html>bad gateway</html>', { status: 502, statusText: 'Bad Gateway' })
    );
    const error = await client(server)
      .getExperiment(1)
      .catch(e => e);
    expect(error).toBeInstanceOf(DetHubError);
    expect([error.status, error.message]).toEqual([502, '502 Bad Gateway']);
  });

  it('asks for downsampled metrics and fills in the trial id', async () => {
    const server = new FakeServer().on('GET', 'api/v1/trials/7/metrics', () =>
      json({
        metrics: [
          { id: 1, group: 'validation', steps_completed: 4, report_time: '', metrics: { v: 1 } }
        ]
      })
    );
    const rows = await client(server).trialMetrics(7, {
      group: 'validation',
      maxPoints: 40,
      metric: 'v'
    });

    expect(rows[0].trial_id).toBe(7);
    const params = server.requests[0].url.searchParams;
    expect([params.get('group'), params.get('max_points'), params.get('metric')]).toEqual([
      'validation',
      '40',
      'v'
    ]);
  });

  it('links checkpoint downloads to the notebook server', () => {
    const uuid = '0f3c2a1b-0000-4000-8000-000000000001';
    expect(client(new FakeServer()).checkpointDownloadUrl(uuid)).toBe(
      `${BASE}det-hub/checkpoints/${uuid}/download`
    );
  });
});

describe('DetHubClient.followExperimentList', () => {
  it('asks for the event stream with the filters, and passes its events on', async () => {
    const server = new FakeServer().on('GET', 'api/v1/experiments/stream', () =>
      streamed([
        ': heartbeat\n\n',
        sse('snapshot', { experiments: [experiment({ id: 2 })], total: 1 }).slice(0, 20),
        sse('snapshot', { experiments: [experiment({ id: 2 })], total: 1 }).slice(20),
        sse('experiment', experiment({ id: 3 })),
        sse('removed', { id: 2 })
      ])
    );
    const abort = new AbortController();
    const seen: string[] = [];
    const done = client(server).followExperimentList(
      event => {
        seen.push(
          event.kind === 'snapshot'
            ? `snapshot ${event.experiments.map(e => e.id).join(',')} of ${event.total}`
            : event.kind === 'experiment'
              ? `experiment ${event.experiment.id}`
              : `removed ${event.id}`
        );
        if (seen.length === 3) {
          abort.abort();
        }
      },
      { owner: 'alice', archived: false, signal: abort.signal }
    );
    await done;
    expect(seen).toEqual(['snapshot 2 of 1', 'experiment 3', 'removed 2']);
    const [request] = server.requests;
    expect(request.headers.get('Accept')).toBe('text/event-stream');
    expect(request.url.searchParams.get('owner')).toBe('alice');
    expect(request.url.searchParams.get('archived')).toBe('false');
  });
});

describe('DetHubClient.followExperiment', () => {
  const STREAM = 'api/v1/experiments/1/metrics/stream';

  it('reads metric, state and rollback events cut anywhere, until the end event', async () => {
    const state = { experiment_id: 1, state: 'ACTIVE', progress: 0.5, trials: [] };
    const text =
      sse('state', state) +
      ': heartbeat\n\n' +
      sse('metrics', row(4, 7, 2, { loss: 0.5 }), 4) +
      sse('metrics', row(5, 7, 4, { loss: 0.25 }), 5) +
      sse('rolled_back', { trial_id: 7, run_id: 2, steps_completed: 2 }) +
      sse('end', { after_id: 5, state: 'COMPLETED' });
    // Cut into 7-byte pieces: lines and frames span chunks.
    const chunks = text.match(/[\s\S]{1,7}/g) ?? [];
    const server = new FakeServer().on('GET', STREAM, () => streamed(chunks));
    const events: ExperimentEvent[] = [];

    const last = await client(server).followExperiment(1, e => events.push(e), { afterId: 3 });

    expect(last).toBe(5);
    expect(
      events.map(e =>
        e.kind === 'metrics'
          ? e.row.id
          : e.kind === 'state'
            ? e.state.state
            : `trial ${e.rolledBack.trial_id} past ${e.rolledBack.steps_completed}`
      )
    ).toEqual(['ACTIVE', 4, 5, 'trial 7 past 2']);
    expect(server.requests).toHaveLength(1);
    expect(server.requests[0].url.searchParams.get('after_id')).toBe('3');
    expect(server.requests[0].headers.get('Accept')).toBe('text/event-stream');
  });

  it('connects again after the last row when asked to, or when the stream breaks', async () => {
    const answers = [
      () =>
        streamed([sse('metrics', row(1, 7, 1, { loss: 1 }), 1), sse('reconnect', { after_id: 1 })]),
      () => json({ error: 'the master is restarting', details: [] }, 503),
      () =>
        streamed([
          sse('metrics', row(1, 7, 1, { loss: 1 }), 1),
          sse('metrics', row(2, 7, 2, { loss: 0.5 }), 2)
        ]),
      () => streamed([sse('end', { after_id: 2, state: 'COMPLETED' })])
    ];
    const server = new FakeServer().on('GET', STREAM, () => (answers.shift() as () => Response)());
    const rows: number[] = [];

    await client(server).followExperiment(
      1,
      e => {
        if (e.kind === 'metrics') {
          rows.push(e.row.id);
        }
      },
      { retryDelay: 1 }
    );

    // Row 1, sent again after the reconnection, is passed on once.
    expect(rows).toEqual([1, 2]);
    expect(server.requests.map(r => r.url.searchParams.get('after_id'))).toEqual([
      '0',
      '1',
      '1',
      '2'
    ]);
  });

  it('gives up at once when the master refuses the stream', async () => {
    const server = new FakeServer().on('GET', STREAM, () =>
      json({ error: 'experiment 1 does not exist', details: [] }, 404)
    );
    await expect(client(server).followExperiment(1, () => undefined)).rejects.toMatchObject({
      status: 404,
      message: 'experiment 1 does not exist'
    });
    expect(server.requests).toHaveLength(1);
  });

  it('gives up after maxFailures connections in a row that brought nothing', async () => {
    const server = new FakeServer().on('GET', STREAM, () =>
      json({ error: 'down', details: [] }, 502)
    );
    await expect(
      client(server).followExperiment(1, () => undefined, { maxFailures: 2, retryDelay: 1 })
    ).rejects.toMatchObject({ status: 502 });
    expect(server.requests).toHaveLength(3);
  });

  it('stops when aborted, without an error', async () => {
    const abort = new AbortController();
    const server = new FakeServer().on('GET', STREAM, () => {
      setTimeout(() => abort.abort(), 5);
      return streamed(Array.from({ length: 1000 }, () => ': heartbeat\n\n'));
    });
    await expect(
      client(server).followExperiment(1, () => undefined, { signal: abort.signal })
    ).resolves.toBe(0);
  });
});

describe('DetHubClient.followLogs', () => {
  const line = (id: number, message: string): ILogLine => ({
    id,
    trial_id: 7,
    allocation_id: '7.0',
    timestamp: '',
    rank: 0,
    stdtype: 'stdout',
    message
  });
  const ndjson = (...lines: ILogLine[]): string =>
    lines.map(l => JSON.stringify(l) + '\n').join('');

  it('passes lines on as they come and stops once the trial has ended', async () => {
    const text = ndjson(line(1, 'starting'), line(2, 'step 1'), line(3, 'done'));
    const server = new FakeServer()
      .on('GET', 'api/v1/trials/7/logs', () =>
        streamed(text.match(/[\s\S]{1,11}/g) ?? [], 'application/x-ndjson')
      )
      .on('GET', 'api/v1/trials/7', () => json({ trial: trial({ state: 'COMPLETED' }) }));
    const seen: string[] = [];

    const last = await client(server).followLogs(7, lines =>
      seen.push(...lines.map(l => l.message))
    );

    expect(seen).toEqual(['starting', 'step 1', 'done']);
    expect(last).toBe(3);
    expect(server.requests[0].url.searchParams.get('follow')).toBe('true');
  });

  it('reads on after the last line when the stream breaks while the trial runs', async () => {
    const answers = [ndjson(line(1, 'a')), ndjson(line(2, 'b'))];
    const states = ['ACTIVE', 'COMPLETED'];
    const server = new FakeServer()
      .on('GET', 'api/v1/trials/7/logs', () =>
        streamed([answers.shift() ?? ''], 'application/x-ndjson')
      )
      .on('GET', 'api/v1/trials/7', () =>
        json({ trial: trial({ state: states.shift() as 'ACTIVE' }) })
      );
    const seen: string[] = [];

    await client(server).followLogs(7, lines => seen.push(...lines.map(l => l.message)), {
      retryDelay: 1
    });

    expect(seen).toEqual(['a', 'b']);
    expect(server.to('api/v1/trials/7/logs').map(r => r.url.searchParams.get('after_id'))).toEqual([
      '0',
      '1'
    ]);
  });

  it('reads what is stored once without follow', async () => {
    const server = new FakeServer().on('GET', 'api/v1/trials/7/logs', () =>
      streamed([ndjson(line(1, 'a'), line(2, 'b'))], 'application/x-ndjson')
    );
    const seen: number[] = [];
    await client(server).followLogs(7, lines => seen.push(...lines.map(l => l.id)), {
      follow: false
    });
    expect(seen).toEqual([1, 2]);
    expect(server.requests).toHaveLength(1);
    expect(server.requests[0].url.searchParams.get('follow')).toBe('false');
  });
});
