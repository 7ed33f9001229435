import { DetHubClient } from '../src/api/client';
import { IAgent, IClusterAllocation, IClusterState, IJob, IResourcePool } from '../src/api/types';
import { allocationTrial, ClusterModel, slotHolder } from '../src/model/cluster';
import { FakeServer, json, LiveEventStream, until } from './fakeServer';

function job(fields: Partial<IJob>): IJob {
  return {
    job_id: 'exp-1',
    type: 'EXPERIMENT',
    name: 'mnist',
    owner: 'alice',
    resource_pool: 'default',
    queue_position: 1,
    priority: 42,
    weight: 1,
    state: 'SCHEDULED',
    slots_requested: 1,
    slots_allocated: 1,
    allocations: 1,
    preemptible: true,
    submitted: '2026-11-22T10:00:00Z',
    queued_at: '2026-11-22T10:00:00Z',
    experiment_id: 1,
    task_id: null,
    ...fields
  };
}

function allocation(fields: Partial<IClusterAllocation>): IClusterAllocation {
  return {
    id: '7.ab',
    job_id: 'exp-1',
    owner: 'alice',
    experiment_id: 1,
    trial_id: 7,
    task_id: null,
    state: 'RUNNING',
    slots: 1,
    ...fields
  };
}

function agent(fields: Partial<IAgent>, held: (string | null)[] = ['7.ab', null]): IAgent {
  return {
    id: 'local',
    type: 'local',
    resource_pool: 'default',
    enabled: true,
    address: '127.0.0.1',
    connected: true,
    isolation_warning: null,
    slots: held.map((allocationId, id) => ({
      id,
      type: 'cpu',
      device: '',
      cpus: [id],
      description: `cpu ${id}`,
      allocation_id: allocationId
    })),
    ...fields
  };
}

const POOL: IResourcePool = {
  name: 'default',
  description: '',
  type: 'local',
  agents: 1,
  slots_total: 2,
  slots_used: 1,
  slot_type: 'cpu',
  scheduler: 'priority',
  preemption: false,
  fitting_policy: 'best',
  preemption_timeout: 3600,
  default: true
};

function snapshot(fields: Partial<IClusterState> = {}): IClusterState {
  return {
    agents: [agent({})],
    resource_pools: [POOL],
    jobs: [job({})],
    allocations: [allocation({})],
    ...fields
  };
}

describe('allocation ids', () => {
  it('name a trial', () => {
    expect(allocationTrial('7.ab12cd34')).toBe(7);
    expect(allocationTrial('task-3.ab12cd34')).toBeNull();
  });
});

describe('slotHolder', () => {
  const allocations = [
    allocation({}),
    allocation({
      id: 'task-3.ab',
      job_id: 'cmd-3',
      owner: 'bob',
      experiment_id: null,
      trial_id: null,
      task_id: 3
    })
  ];

  it("is a trial's experiment job and its owner", () => {
    expect(slotHolder('7.ab', allocations)).toEqual({
      jobId: 'exp-1',
      owner: 'alice',
      experimentId: 1,
      trialId: 7
    });
  });

  it("is a task's job", () => {
    expect(slotHolder('task-3.ab', allocations)).toEqual({
      jobId: 'cmd-3',
      owner: 'bob',
      experimentId: null,
      trialId: null
    });
  });

  it('says what the id tells of an allocation the cluster does not list', () => {
    expect(slotHolder('9.ab', allocations)).toEqual({
      jobId: 'trial 9',
      owner: null,
      experimentId: null,
      trialId: 9
    });
    expect(slotHolder('task-4.cd', allocations)).toMatchObject({ jobId: 'task-4.cd' });
  });
});

describe('ClusterModel', () => {
  function setUp(): { server: FakeServer; stream: LiveEventStream; model: ClusterModel } {
    const stream = new LiveEventStream();
    const server = new FakeServer().on('GET', 'api/v1/cluster/stream', stream.respond);
    const model = new ClusterModel(new DetHubClient({ serverSettings: server.settings() }), {
      retryDelay: 1,
      maxDelay: 5
    });
    return { server, stream, model };
  }

  it('shows the snapshot, then each part that changes, and never polls', async () => {
    const { server, stream, model } = setUp();
    expect(model.loaded).toBe(false);
    model.start();
    expect(model.live).toBe(true);
    await until(() => stream.open);
    stream.send('snapshot', snapshot());
    await until(() => model.loaded);
    expect(model.agents[0].enabled).toBe(true);
    expect(model.pools).toEqual([POOL]);
    expect(model.jobs.map(j => j.job_id)).toEqual(['exp-1']);
    expect(model.holder('7.ab')).toMatchObject({ jobId: 'exp-1', owner: 'alice', trialId: 7 });
    let changes = 0;
    model.changed.connect(() => (changes += 1));

    // The agent disabled: its part alone; the rest stays as it was.
    stream.send('cluster', { agents: [agent({ enabled: false })] });
    await until(() => !model.agents[0].enabled);
    expect(model.jobs.map(j => j.job_id)).toEqual(['exp-1']);
    expect(changes).toBe(1);

    // A command queued behind the experiment, then started on the free slot.
    const queued = job({
      job_id: 'cmd-3',
      type: 'COMMAND',
      owner: 'bob',
      state: 'QUEUED',
      queue_position: 2,
      slots_allocated: 0,
      experiment_id: null,
      task_id: 3
    });
    const command = allocation({
      id: 'task-3.cd',
      job_id: 'cmd-3',
      owner: 'bob',
      experiment_id: null,
      trial_id: null,
      task_id: 3,
      state: 'QUEUED'
    });
    stream.send('cluster', { jobs: [job({}), queued], allocations: [allocation({}), command] });
    await until(() => model.jobs.length === 2);
    expect(model.jobs[1]).toMatchObject({ job_id: 'cmd-3', state: 'QUEUED' });
    stream.send('cluster', {
      agents: [agent({}, ['7.ab', 'task-3.cd'])],
      jobs: [job({}), { ...queued, state: 'SCHEDULED', slots_allocated: 1 }],
      allocations: [allocation({}), { ...command, state: 'RUNNING' }]
    });
    await until(() => model.jobs[1]?.state === 'SCHEDULED');
    expect(model.agents[0].slots[1].allocation_id).toBe('task-3.cd');
    expect(model.holder('task-3.cd')).toEqual({
      jobId: 'cmd-3',
      owner: 'bob',
      experimentId: null,
      trialId: null
    });

    // Nothing asked of the master but the stream, once.
    await new Promise(resolve => setTimeout(resolve, 30));
    expect(server.requests.map(r => r.path)).toEqual(['api/v1/cluster/stream']);
    model.stop();
    expect(model.live).toBe(false);
    await until(() => stream.cancelled === 1);
  });

  it('takes a fresh snapshot when the master asks to reconnect, or the stream breaks', async () => {
    const { stream, model } = setUp();
    model.start();
    await until(() => stream.open);
    stream.send('snapshot', snapshot());
    await until(() => model.loaded);

    stream.send('reconnect', {});
    stream.close();
    await until(() => stream.connections === 2 && stream.open);
    stream.send('snapshot', snapshot({ jobs: [], allocations: [] }));
    await until(() => model.jobs.length === 0);

    stream.close();
    await until(() => stream.connections === 3 && stream.open);
    stream.send('snapshot', snapshot({ agents: [agent({ connected: false })] }));
    await until(() => !model.agents[0].connected);
    expect(model.jobs).toHaveLength(1);
    expect(model.error).toBeNull();
    model.stop();
  });

  it('says what is wrong while the master cannot be reached, and goes on trying', async () => {
    const stream = new LiveEventStream();
    let failures = 2;
    const server = new FakeServer().on('GET', 'api/v1/cluster/stream', () =>
      failures-- > 0
        ? json({ error: 'the master cannot be reached', details: [] }, 502)
        : stream.respond()
    );
    const model = new ClusterModel(new DetHubClient({ serverSettings: server.settings() }), {
      retryDelay: 1,
      maxDelay: 5
    });
    const errors: (string | null)[] = [];
    model.changed.connect(() => errors.push(model.error));
    model.start();
    await until(() => stream.open);
    expect(errors).toContain('the master cannot be reached');
    stream.send('snapshot', snapshot());
    await until(() => model.loaded);
    expect(model.error).toBeNull();
    expect(server.to('api/v1/cluster/stream')).toHaveLength(3);
    model.stop();
  });

  it('ignores what a stopped stream still delivers', async () => {
    const { stream, model } = setUp();
    model.start();
    await until(() => stream.open);
    stream.send('snapshot', snapshot());
    await until(() => model.loaded);
    // Written just before the model stops, read after.
    stream.send('cluster', { jobs: [] });
    model.stop();
    await new Promise(resolve => setTimeout(resolve, 30));
    expect(model.jobs).toHaveLength(1);
  });
});
