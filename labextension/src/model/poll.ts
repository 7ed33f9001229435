import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';

/**
 * Calls `factory` every `interval` ms while `isVisible()` holds and the browser tab is shown;
 * while hidden it calls nothing (the timer runs on, asking again at each tick). A failing
 * factory is retried with a growing interval, up to `max`.
 */
export class VisiblePoll implements IDisposable {
  constructor(options: {
    factory: () => Promise<unknown>;
    interval: number;
    isVisible: () => boolean;
    name: string;
    max?: number;
  }) {
    this._isVisible = options.isVisible;
    this._poll = new Poll({
      auto: true,
      factory: async () => {
        await options.factory();
      },
      frequency: {
        interval: options.interval,
        backoff: true,
        max: options.max ?? Math.max(options.interval * 10, 30000)
      },
      name: options.name,
      // Standing by skips a tick without calling the factory.
      standby: () => (this._isVisible() ? 'when-hidden' : true)
    });
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /**
   * Calls the factory now, when visible (for example, when the panel has just been shown);
   * resolves once it has run.
   */
  async wake(): Promise<void> {
    if (this._isVisible() && !this.isDisposed) {
      await this._poll.refresh();
      await this._poll.tick;
    }
  }

  dispose(): void {
    this._poll.dispose();
  }

  private readonly _poll: Poll;
  private readonly _isVisible: () => boolean;
}
