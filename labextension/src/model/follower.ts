/**
 * Following one of the master's streams at a time, for a model that shows what it sends (the
 * experiment list, the cluster): started and stopped at will, with the problem it has now.
 */

import { errorText } from '../api/client';

/**
 * Follows with what `start` is given, until `stop`; a stopped stream's last problem stays
 * until its next event. `onChange` hears whenever `live` or `error` changes.
 */
export class StreamFollower {
  constructor(private readonly _onChange: () => void) {}

  /** Whether a stream is followed now. */
  get live(): boolean {
    return this._abort !== null;
  }

  /** What went wrong with the stream, or null while it is fine. */
  get error(): string | null {
    return this._error;
  }

  /**
   * Follows with `follow`, which reads the stream until the signal aborts, telling `problem`
   * of each failed attempt, and rejects when the master refuses it for good. Does nothing when
   * already following.
   */
  start(follow: (signal: AbortSignal, problem: (error: unknown) => void) => Promise<void>): void {
    if (this._abort !== null) {
      return;
    }
    const abort = new AbortController();
    this._abort = abort;
    const problem = (error: unknown): void => {
      if (!abort.signal.aborted) {
        this._error = errorText(error);
        this._onChange();
      }
    };
    void follow(abort.signal, problem)
      .catch(problem)
      .finally(() => {
        if (this._abort === abort) {
          this._abort = null;
          this._onChange();
        }
      });
    this._onChange();
  }

  /** Stops following; false when nothing was followed. */
  stop(): boolean {
    const abort = this._abort;
    if (abort === null) {
      return false;
    }
    this._abort = null;
    abort.abort();
    this._onChange();
    return true;
  }

  /** The stream delivered an event: it is fine again. */
  heard(): void {
    this._error = null;
  }

  private _abort: AbortController | null = null;
  private _error: string | null = null;
}
