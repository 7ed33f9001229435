/**
 * Reading the master's streamed answers as they arrive: Server-Sent Events (an experiment's
 * metric stream) and newline-delimited JSON (a trial's logs). `EventSource` cannot be used:
 * requests must go through JupyterLab's `ServerConnection`, which adds the notebook server's
 * login, so the stream is read from a `fetch` body instead.
 */

/** One Server-Sent Event: its `event:` name (`message` when none), `data:` and `id:`. */
export interface IServerSentEvent {
  event: string;
  data: string;
  id: string | null;
}

/**
 * Splits Server-Sent Events text, fed in chunks cut anywhere, into events (the WHATWG
 * event-stream format: fields up to a blank line, `:` comments, CR, LF or CRLF line ends).
 */
export class ServerSentEventParser {
  /** Feeds a chunk of the stream; returns the events it completed. */
  push(chunk: string): IServerSentEvent[] {
    this._buffer += chunk;
    const events: IServerSentEvent[] = [];
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this._buffer);
      // A lone CR at the very end may be the first half of a CRLF: wait for more.
      if (!match || (match[0] === '\r' && match.index === this._buffer.length - 1)) {
        break;
      }
      const line = this._buffer.slice(0, match.index);
      this._buffer = this._buffer.slice(match.index + match[0].length);
      const event = this._line(line);
      if (event) {
        events.push(event);
      }
    }
    return events;
  }

  private _line(line: string): IServerSentEvent | null {
    if (line === '') {
      if (this._data === null) {
        this._name = '';
        return null;
      }
      const event = { event: this._name || 'message', data: this._data, id: this._id };
      this._name = '';
      this._data = null;
      return event;
    }
    if (line.startsWith(':')) {
      return null;
    }
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) {
      value = value.slice(1);
    }
    if (field === 'event') {
      this._name = value;
    } else if (field === 'data') {
      this._data = this._data === null ? value : `${this._data}\n${value}`;
    } else if (field === 'id' && !value.includes('\0')) {
      this._id = value;
    }
    return null;
  }

  private _buffer = '';
  private _name = '';
  private _data: string | null = null;
  private _id: string | null = null;
}

/** Splits newline-delimited JSON, fed in chunks cut anywhere, into parsed values. */
export class NdjsonParser<T = unknown> {
  /** Feeds a chunk; returns the values of the lines it completed (blank lines skipped). */
  push(chunk: string): T[] {
    this._buffer += chunk;
    const lines = this._buffer.split('\n');
    this._buffer = lines.pop() ?? '';
    return lines.filter(line => line.trim() !== '').map(line => JSON.parse(line) as T);
  }

  /** The last line, when the stream ended without a newline after it. */
  flush(): T[] {
    const rest = this._buffer;
    this._buffer = '';
    return rest.trim() === '' ? [] : [JSON.parse(rest) as T];
  }

  private _buffer = '';
}

/**
 * Reads a response body as text chunks until it ends or `signal` aborts, calling `onText`
 * with each decoded chunk.
 */
export async function readText(
  response: Response,
  onText: (text: string) => void,
  signal?: AbortSignal
): Promise<void> {
  if (!response.body) {
    onText(await response.text());
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const cancel = (): void => {
    void reader.cancel().catch(() => undefined);
  };
  signal?.addEventListener('abort', cancel);
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done || signal?.aborted) {
        break;
      }
      onText(decoder.decode(value, { stream: true }));
    }
    const tail = decoder.decode();
    if (tail) {
      onText(tail);
    }
  } finally {
    signal?.removeEventListener('abort', cancel);
  }
}
