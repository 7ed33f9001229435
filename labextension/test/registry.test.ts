import { DetHubClient } from '../src/api/client';
import { IModel } from '../src/api/types';
import { registerCheckpoint, versionLabel } from '../src/model/registry';
import { FakeServer, json } from './fakeServer';

const UUID = '0c7e5d9a-1111-4222-8333-444455556666';

function model(name: string, versions = 1): IModel {
  return {
    id: 1,
    name,
    description: '',
    labels: [],
    notes: '',
    metadata: {},
    owner: 'alice',
    creation_time: '2026-11-22T10:00:00Z',
    last_updated_time: '2026-11-22T10:00:00Z',
    archived: false,
    num_versions: versions
  };
}

function version(name: string, number: number): unknown {
  return {
    id: 10 + number,
    model_id: 1,
    model_name: name,
    version: number,
    checkpoint_uuid: UUID,
    owner: 'alice'
  };
}

function setUp(createStatus = 201): FakeServer {
  return new FakeServer()
    .on('POST', /^api\/v1\/models$/, request => {
      const { name } = JSON.parse(request.body ?? '{}');
      if (createStatus === 201) {
        return json({ model: model(name, 0) }, 201);
      }
      const error =
        createStatus === 409
          ? `model name ${JSON.stringify(name)} is taken`
          : 'name: must not start or end with a space';
      return json({ error, details: [] }, createStatus);
    })
    .on('POST', /^api\/v1\/models\/[^/]+\/versions$/, request => {
      const name = decodeURIComponent(request.path.split('/')[3]);
      return json({ model_version: version(name, 3) }, 201);
    });
}

function client(server: FakeServer): DetHubClient {
  return new DetHubClient({ serverSettings: server.settings() });
}

function calls(server: FakeServer): string[] {
  return server.requests.map(r => `${r.method} ${r.path} ${r.body ?? ''}`);
}

describe('registerCheckpoint', () => {
  it('adds a version to a model that exists', async () => {
    const server = setUp();
    const done = await registerCheckpoint(client(server), 'mnist', UUID, [model('mnist', 2)]);
    expect(done.createdModel).toBe(false);
    expect(done.version.version).toBe(3);
    expect(calls(server)).toEqual([
      `POST api/v1/models/mnist/versions {"checkpoint_uuid":"${UUID}"}`
    ]);
  });

  it('makes a model of a new name first, its name encoded in the path', async () => {
    const server = setUp();
    const done = await registerCheckpoint(client(server), 'mnist cnn', UUID, [model('mnist')]);
    expect(done.createdModel).toBe(true);
    expect(done.version.model_name).toBe('mnist cnn');
    expect(calls(server)).toEqual([
      'POST api/v1/models {"name":"mnist cnn"}',
      `POST api/v1/models/mnist%20cnn/versions {"checkpoint_uuid":"${UUID}"}`
    ]);
  });

  it('uses a model of that name made meanwhile', async () => {
    const server = setUp(409);
    const done = await registerCheckpoint(client(server), 'late', UUID, []);
    expect(done.createdModel).toBe(false);
    expect(server.requests.map(r => r.path)).toEqual([
      'api/v1/models',
      'api/v1/models/late/versions'
    ]);
  });

  it("passes the master's refusal of a name on, registering nothing", async () => {
    const server = setUp(400);
    await expect(registerCheckpoint(client(server), ' bad', UUID, [])).rejects.toThrow(
      'name: must not start or end with a space'
    );
    expect(server.requests).toHaveLength(1);
  });

  it('labels a version by its model and number', () => {
    expect(versionLabel(version('mnist', 2) as never)).toBe('mnist v2');
  });
});
