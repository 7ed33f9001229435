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
