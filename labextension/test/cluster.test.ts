import { DetHubClient } from '../src/api/client';
import { IJob } from '../src/api/types';
import { allocationTask, allocationTrial, ClusterModel, slotHolder } from '../src/model/cluster';
import { FakeServer, json } from './fakeServer';
import { trial } from './fixtures';

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

describe('allocation ids', () => {
  it('name a trial or a task', () => {
    expect(allocationTrial('7.ab12cd34')).toBe(7);
    expect(allocationTrial('task-3.ab12cd34')).toBeNull();
    expect(allocationTask('task-3.ab12cd34')).toBe(3);
    expect(allocationTask('7.ab12cd34')).toBeNull();
  });
});

describe('slotHolder', () => {
  const jobs = [
    job({}),
    job({ job_id: 'cmd-3', type: 'COMMAND', owner: 'bob', experiment_id: null, task_id: 3 })
  ];

  it("is a trial's experiment job and its owner", () => {
    expect(slotHolder('7.ab', jobs, new Map([[7, 1]]))).toEqual({
      jobId: 'exp-1',
      owner: 'alice',
      experimentId: 1,
      trialId: 7
    });
  });

  it("is a task's job", () => {
    expect(slotHolder('task-3.ab', jobs, new Map())).toEqual({
      jobId: 'cmd-3',
      owner: 'bob',
      experimentId: null,
      trialId: null
    });
  });

  it('says what it can when the queue does not know the holder', () => {
    expect(slotHolder('9.ab', jobs, new Map())).toMatchObject({
      jobId: 'trial 9',
      owner: null,
      trialId: 9
    });
    expect(slotHolder('9.ab', jobs, new Map([[9, 4]]))).toMatchObject({
      jobId: 'exp-4',
      experimentId: 4
    });
  });
});

describe('ClusterModel', () => {
  it("looks up each slot-holding trial's experiment once", async () => {
    const server = new FakeServer()
      .on('GET', 'api/v1/agents', () =>
        json({
          agents: [
            {
              id: 'local',
              type: 'local',
              resource_pool: 'default',
              enabled: true,
              address: '127.0.0.1',
              connected: true,
              slots: [
                { id: '0', type: 'cpu', device: null, description: 'cpu 0', allocation_id: '7.ab' },
                { id: '1', type: 'cpu', device: null, description: 'cpu 1', allocation_id: null }
              ]
            }
          ]
        })
      )
      .on('GET', 'api/v1/resource_pools', () => json({ resource_pools: [] }))
      .on('GET', 'api/v1/jobs', () => json({ jobs: [job({})] }))
      .on('GET', 'api/v1/trials/7', () => json({ trial: trial({ id: 7, experiment_id: 1 }) }));
    const model = new ClusterModel(new DetHubClient({ serverSettings: server.settings() }));

    await model.refresh();
    await model.refresh();

    expect(model.holder('7.ab')).toMatchObject({ jobId: 'exp-1', owner: 'alice', trialId: 7 });
    expect(server.to('api/v1/trials/7')).toHaveLength(1);
    expect(server.to('api/v1/agents')).toHaveLength(2);
  });
});
