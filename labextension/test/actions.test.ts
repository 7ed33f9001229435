import { actionsFor, mayChange } from '../src/model/actions';
import { IUser } from '../src/api/types';
import { experiment } from './fixtures';

function user(username: string, admin = false): IUser {
  return {
    id: 1,
    username,
    admin,
    active: true,
    created_at: '2026-01-01T00:00:00Z',
    agent_user_group: null
  };
}

describe('actionsFor', () => {
  const alices = experiment({ owner: 'alice', state: 'ACTIVE' });

  it('offers the owner what the state allows', () => {
    expect(actionsFor(alices, user('alice'))).toEqual(['pause', 'kill']);
    expect(actionsFor({ ...alices, state: 'PAUSED' }, user('alice'))).toEqual(['activate', 'kill']);
    expect(actionsFor({ ...alices, state: 'COMPLETED' }, user('alice'))).toEqual(['archive']);
  });

  it("offers nothing on another user's experiment, all to an admin", () => {
    expect(actionsFor(alices, user('bob'))).toEqual([]);
    expect(mayChange(alices, user('bob'))).toBe(false);
    expect(actionsFor(alices, user('root', true))).toEqual(['pause', 'kill']);
    expect(mayChange(alices, user('root', true))).toBe(true);
  });

  it('offers nothing until it is known who looks', () => {
    expect(actionsFor(alices, null)).toEqual([]);
    expect(mayChange(alices, null)).toBe(false);
  });
});
