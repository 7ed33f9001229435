import { sleep } from '../src/api/client';
import { VisiblePoll } from '../src/model/poll';

describe('VisiblePoll', () => {
  it('asks only while visible, and at once when woken', async () => {
    let visible = false;
    let calls = 0;
    const poll = new VisiblePoll({
      name: 'test',
      interval: 20,
      isVisible: () => visible,
      factory: async () => {
        calls += 1;
      }
    });
    try {
      await sleep(150);
      expect(calls).toBe(0);

      visible = true;
      await poll.wake();
      expect(calls).toBe(1);
      await sleep(150);
      expect(calls).toBeGreaterThanOrEqual(3);

      visible = false;
      await sleep(40);
      const hidden = calls;
      await sleep(150);
      expect(calls).toBe(hidden);

      // Waking a hidden panel asks nothing either.
      await poll.wake();
      expect(calls).toBe(hidden);
    } finally {
      poll.dispose();
    }
  });
});
