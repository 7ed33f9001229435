/**
 * A stand-in for the notebook server in the browser's `fetch`: it records every request the
 * panel makes and answers from routes the test sets.
 */

import { ServerConnection } from '@jupyterlab/services';

export const BASE = 'http://lab.test/user/alice/';

export interface IRecorded {
  method: string;
  url: URL;
  /** The path below `<base_url>det-hub/`. */
  path: string;
  headers: Headers;
  body: string | null;
}

type Handler = (request: IRecorded) => Response | Promise<Response>;

export class FakeServer {
  readonly requests: IRecorded[] = [];

  /** Answers `method` on `<base_url>det-hub/<path>` (any query) with `handler`. */
  on(method: string, path: string | RegExp, handler: Handler): this {
    this._routes.push({ method, path, handler });
    return this;
  }

  readonly fetch = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const request = input instanceof Request ? input : new Request(input, init);
    const url = new URL(request.url);
    const prefix = new URL(BASE).pathname + 'det-hub/';
    if (!url.pathname.startsWith(prefix)) {
      throw new TypeError(`the page asked for ${request.url}`);
    }
    const recorded: IRecorded = {
      method: request.method,
      url,
      path: url.pathname.slice(prefix.length),
      headers: request.headers,
      body: request.body ? await request.text() : null
    };
    this.requests.push(recorded);
    const route = this._routes.find(
      r =>
        r.method === recorded.method &&
        (typeof r.path === 'string' ? r.path === recorded.path : r.path.test(recorded.path))
    );
    if (!route) {
      return json({ error: `no route for ${recorded.method} ${recorded.path}`, details: [] }, 404);
    }
    return route.handler(recorded);
  };

  /** The settings of a notebook server at BASE whose requests this fake answers. */
  settings(): ServerConnection.ISettings {
    return ServerConnection.makeSettings({
      baseUrl: BASE,
      token: 'notebook-token',
      fetch: this.fetch
    });
  }

  /** The requests made to `path` (below `det-hub/`). */
  to(path: string): IRecorded[] {
    return this.requests.filter(r => r.path === path);
  }

  private readonly _routes: { method: string; path: string | RegExp; handler: Handler }[] = [];
}

export function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'Content-Type': 'application/json' }
  });
}

/** A streamed answer whose body arrives in `chunks`, a tick apart. */
export function streamed(chunks: string[], contentType = 'text/event-stream'): Response {
  const encoder = new TextEncoder();
  let next = 0;
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      await new Promise(resolve => setTimeout(resolve, 1));
      if (next < chunks.length) {
        controller.enqueue(encoder.encode(chunks[next++]));
      } else {
        controller.close();
      }
    }
  });
  return new Response(body, { status: 200, headers: { 'Content-Type': contentType } });
}

/** One Server-Sent Events frame, as the master writes them. */
export function sse(event: string, data: unknown, id?: number): string {
  return `${id !== undefined ? `id: ${id}\n` : ''}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

/**
 * A Server-Sent Events answer the test writes to as it goes, like the master's experiment
 * list: `respond` is a route handler, each call a new connection; `send` writes to the latest
 * one, which stays open until `close` or until the client cancels it.
 */
export class LiveEventStream {
  /** How many connections were made, and how many the client cancelled (closed). */
  connections = 0;
  cancelled = 0;

  /** Whether the latest connection is open. */
  get open(): boolean {
    return this._current !== null;
  }

  readonly respond = (): Response => {
    this.connections += 1;
    let controller: ReadableStreamDefaultController<Uint8Array> | null = null;
    const body = new ReadableStream<Uint8Array>({
      start: c => {
        controller = c;
        this._current = c;
      },
      cancel: () => {
        this.cancelled += 1;
        if (this._current === controller) {
          this._current = null;
        }
      }
    });
    return new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
  };

  /** Writes an event to the open connection. */
  send(event: string, data: unknown): void {
    if (!this._current) {
      throw new Error('no open connection to send to');
    }
    this._current.enqueue(new TextEncoder().encode(sse(event, data)));
  }

  /** Ends the open connection from the server's side. */
  close(): void {
    this._current?.close();
    this._current = null;
  }

  private _current: ReadableStreamDefaultController<Uint8Array> | null = null;
}

/** Waits until `condition` holds, checking every few milliseconds (fails after `timeout`). */
export async function until(condition: () => boolean, timeout = 2000): Promise<void> {
  const deadline = Date.now() + timeout;
  while (!condition()) {
    if (Date.now() > deadline) {
      throw new Error(`not so after ${timeout} ms: ${condition.toString()}`);
    }
    await new Promise(resolve => setTimeout(resolve, 2));
  }
}
