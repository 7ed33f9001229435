/**
 * The panel's way to the det_hub master: the notebook server's extension, which forwards
 * `<base_url>det-hub/api/v1/<path>` to the master's REST API with the master token added on
 * the server. The browser holds no token of the master; requests carry only the notebook
 * server's own login, which `ServerConnection.makeRequest` adds.
 */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { IServerSentEvent, NdjsonParser, readText, ServerSentEventParser } from './streams';
import {
  ClusterEvent,
  ExperimentAction,
  ExperimentEvent,
  ExperimentListEvent,
  ICheckpoint,
  IClusterState,
  IDetHubConfig,
  IExperiment,
  IHyperparameterImportance,
  IJob,
  ILogLine,
  IMetricRow,
  IModel,
  IModelVersion,
  IRolledBack,
  ISearcherView,
  ISearchView,
  IStreamState,
  ITrial,
  isTerminal
} from './types';

/** Query parameters; `undefined` and `null` ones are left out. */
export type Query = Record<string, string | number | boolean | null | undefined>;

/** An answer of the master (or of the server extension) that is not a success. */
export class DetHubError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly details: unknown[] = []
  ) {
    super(message);
    this.name = 'DetHubError';
  }

  /** The error of a failed answer: its JSON `{"error", "details"}`, or its status line. */
  static async fromResponse(response: Response): Promise<DetHubError> {
    let message = `${response.status} ${response.statusText}`.trim();
    let details: unknown[] = [];
    try {
      const body = await response.json();
      if (body && typeof body.error === 'string') {
        message = body.error;
        details = Array.isArray(body.details) ? body.details : [];
      }
    } catch {
      // Not JSON (a proxy's error page): the status line says enough.
    }
    return new DetHubError(response.status, message, details);
  }
}

/** What went wrong, in words: a DetHubError's message and details, or the error's text. */
export function errorText(error: unknown): string {
  if (error instanceof DetHubError) {
    const details = error.details.map(d =>
      typeof d === 'object' && d !== null && 'path' in d && 'message' in d
        ? `${String((d as { path: unknown }).path)}: ${String((d as { message: unknown }).message)}`
        : typeof d === 'string'
          ? d
          : JSON.stringify(d)
    );
    return [error.message, ...details].join('\n');
  }
  return error instanceof Error ? error.message : String(error);
}

/** Statuses a restarting master or a proxy in front of it answers with for a while. */
const RETRYABLE = new Set([502, 503, 504]);

/** Waits `ms`, or less when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise(resolve => {
    if (signal?.aborted) {
      resolve();
      return;
    }
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done);
  });
}

export interface IFollowOptions {
  /** Stops following; the returned promise then resolves. */
  signal?: AbortSignal;
  /** Give up after this many failed connections in a row (default 10). */
  maxFailures?: number;
  /** Milliseconds before the first reconnection, doubled after each failure (default 500). */
  retryDelay?: number;
}

/** How a stream that starts from a snapshot is followed (the experiment list, the cluster). */
export interface ISnapshotFollowOptions {
  /** Stops following; the returned promise then resolves. */
  signal?: AbortSignal;
  /** Hears of each failed attempt to connect. */
  onProblem?: (error: DetHubError) => void;
  /** Milliseconds before the first reconnection, doubled after each failure (default 500). */
  retryDelay?: number;
  /** The longest wait between two reconnections, in milliseconds (default 30000). */
  maxDelay?: number;
}

/** A client of the det_hub master through the notebook server's extension. */
export class DetHubClient {
  constructor(options: { serverSettings?: ServerConnection.ISettings } = {}) {
    this.serverSettings = options.serverSettings ?? ServerConnection.makeSettings();
  }

  /** The notebook server's settings: its base URL, and the `fetch` requests go through. */
  readonly serverSettings: ServerConnection.ISettings;

  /** The URL of `<base_url>det-hub/<path>?<query>`. */
  extensionUrl(path: string, query: Query = {}): string {
    const kept: Record<string, string> = {};
    for (const [key, value] of Object.entries(query)) {
      if (value !== undefined && value !== null) {
        kept[key] = String(value);
      }
    }
    return (
      URLExt.join(this.serverSettings.baseUrl, 'det-hub', path) + URLExt.objectToQueryString(kept)
    );
  }

  /** The URL of the master's `/api/v1/<path>?<query>`, through the extension. */
  apiUrl(path: string, query: Query = {}): string {
    return this.extensionUrl(`api/v1/${path}`, query);
  }

  /**
   * Sends a request to `<base_url>det-hub/<path>`; any status is returned, not thrown.
   *
   * @throws ServerConnection.NetworkError when the notebook server cannot be reached.
   */
  async send(
    method: string,
    path: string,
    options: {
      query?: Query;
      body?: unknown;
      headers?: Record<string, string>;
      signal?: AbortSignal;
    } = {}
  ): Promise<Response> {
    const init: RequestInit = { method, headers: options.headers, signal: options.signal };
    if (options.body !== undefined) {
      init.body = JSON.stringify(options.body);
      init.headers = { 'Content-Type': 'application/json', ...options.headers };
    }
    return ServerConnection.makeRequest(
      this.extensionUrl(path, options.query),
      init,
      this.serverSettings
    );
  }

  /** A JSON answer of `<base_url>det-hub/<path>`; a failed one is thrown as a DetHubError. */
  async json<T>(
    method: string,
    path: string,
    options: { query?: Query; body?: unknown } = {}
  ): Promise<T> {
    const response = await this.send(method, path, options);
    if (!response.ok) {
      throw await DetHubError.fromResponse(response);
    }
    return (await response.json()) as T;
  }

  /** A JSON answer of the master's `/api/v1/<path>`. */
  api<T>(
    method: string,
    path: string,
    options: { query?: Query; body?: unknown } = {}
  ): Promise<T> {
    return this.json<T>(method, `api/v1/${path}`, options);
  }

  /** Where the master is and who the panel acts as. */
  config(): Promise<IDetHubConfig> {
    return this.json<IDetHubConfig>('GET', 'config');
  }

  /** Experiments, newest first. */
  async listExperiments(
    options: { owner?: string; archived?: boolean; state?: string; limit?: number } = {}
  ): Promise<IExperiment[]> {
    const body = await this.api<{ experiments: IExperiment[] }>('GET', 'experiments', {
      query: {
        owner: options.owner,
        archived: options.archived,
        state: options.state,
        limit: options.limit
      }
    });
    return body.experiments;
  }

  /**
   * Follows the master's experiment list (`/experiments/stream`) until `signal` aborts: a
   * `snapshot` of the list first, then each experiment as it is created or changes, and
   * `removed` for one that matches the filters no more. Reconnects as `followSnapshots` says.
   *
   * @throws DetHubError when the master refuses the stream for good (a bad filter, no login).
   */
  async followExperimentList(
    onEvent: (event: ExperimentListEvent) => void,
    options: ISnapshotFollowOptions & { owner?: string; archived?: boolean; limit?: number } = {}
  ): Promise<void> {
    await this.followSnapshots(
      'api/v1/experiments/stream',
      { owner: options.owner, archived: options.archived, limit: options.limit },
      'experiment list',
      options,
      sse => {
        if (sse.event === 'snapshot') {
          const body = JSON.parse(sse.data) as { experiments: IExperiment[]; total: number };
          onEvent({ kind: 'snapshot', experiments: body.experiments, total: body.total });
        } else if (sse.event === 'experiment') {
          onEvent({ kind: 'experiment', experiment: JSON.parse(sse.data) as IExperiment });
        } else if (sse.event === 'removed') {
          onEvent({ kind: 'removed', id: (JSON.parse(sse.data) as { id: number }).id });
        }
      }
    );
  }

  /**
   * Follows the master's cluster (`/cluster/stream`) until `signal` aborts: a `snapshot` of its
   * agents, resource pools, job queue and allocations first, then, as they change, the parts
   * that changed, each whole. Reconnects as `followSnapshots` says.
   *
   * @throws DetHubError when the master refuses the stream for good (no login).
   */
  async followCluster(
    onEvent: (event: ClusterEvent) => void,
    options: ISnapshotFollowOptions = {}
  ): Promise<void> {
    await this.followSnapshots('api/v1/cluster/stream', {}, 'cluster', options, sse => {
      if (sse.event === 'snapshot') {
        onEvent({ kind: 'snapshot', state: JSON.parse(sse.data) as IClusterState });
      } else if (sse.event === 'cluster') {
        onEvent({ kind: 'cluster', changed: JSON.parse(sse.data) as Partial<IClusterState> });
      }
    });
  }

  /**
   * Follows one of the master's streams that begin with a `snapshot` until `signal` aborts,
   * handing each event to `onEvent`. Every connection starts with a fresh snapshot, so nothing
   * is missed across one that broke: the master's `reconnect` is taken up at once; a failed or
   * dropped connection is tried again after a delay that doubles with each failure in a row
   * (from `retryDelay`, at most `maxDelay`), for as long as it takes; `onProblem` hears of
   * each failed attempt (`what` names the stream in its message).
   *
   * @throws DetHubError when the master refuses the stream for good.
   */
  private async followSnapshots(
    path: string,
    query: Query,
    what: string,
    options: ISnapshotFollowOptions,
    onEvent: (sse: IServerSentEvent) => void
  ): Promise<void> {
    const { signal } = options;
    let failures = 0;
    while (!signal?.aborted) {
      let snapshot = false;
      let reconnect = false;
      const failed = await this.readEventStream(path, query, signal, sse => {
        if (sse.event === 'reconnect') {
          reconnect = true;
          return;
        }
        snapshot = snapshot || sse.event === 'snapshot';
        onEvent(sse);
      });
      if (signal?.aborted) {
        break;
      }
      if (reconnect) {
        // Asked by the master (it fell behind, or it is stopping): at once, for a fresh copy.
        failures = 0;
        continue;
      }
      if (snapshot) {
        // It ran a while and broke off (a proxy's time limit, say): no sign of trouble.
        failures = 0;
      } else {
        failures += 1;
        options.onProblem?.(
          failed ?? new DetHubError(0, `the ${what} stream ended before its snapshot`)
        );
      }
      await sleep(
        Math.min((options.retryDelay ?? 500) * 2 ** failures, options.maxDelay ?? 30000),
        signal
      );
    }
  }

  async getExperiment(id: number): Promise<IExperiment> {
    return (await this.api<{ experiment: IExperiment }>('GET', `experiments/${id}`)).experiment;
  }

  /** Pauses, activates, kills, archives or unarchives an experiment; its new state. */
  async experimentAction(id: number, action: ExperimentAction): Promise<IExperiment> {
    return (await this.api<{ experiment: IExperiment }>('POST', `experiments/${id}/${action}`))
      .experiment;
  }

  /** Sets the priority (1 first, 99 last) of an experiment's job. */
  async setExperimentPriority(id: number, priority: number): Promise<IJob> {
    const body = await this.api<{ job: IJob }>('PATCH', `jobs/exp-${id}`, { body: { priority } });
    return body.job;
  }

  async listTrials(experimentId: number): Promise<ITrial[]> {
    return (await this.api<{ trials: ITrial[] }>('GET', `experiments/${experimentId}/trials`))
      .trials;
  }

  async getTrial(id: number): Promise<ITrial> {
    return (await this.api<{ trial: ITrial }>('GET', `trials/${id}`)).trial;
  }

  /**
   * A trial's metric reports, ascending; with `maxPoints`, downsampled by the master to about
   * that many per group (keeping the shape of `metric`'s curve when given).
   */
  async trialMetrics(
    id: number,
    options: { group?: string; maxPoints?: number; metric?: string } = {}
  ): Promise<IMetricRow[]> {
    const body = await this.api<{ metrics: IMetricRow[] }>('GET', `trials/${id}/metrics`, {
      query: { group: options.group, max_points: options.maxPoints, metric: options.metric }
    });
    return body.metrics.map(row => ({ ...row, trial_id: row.trial_id ?? id }));
  }

  /** The experiment's search at a glance, with the rung table of an ASHA search. */
  async getSearcher(experimentId: number): Promise<ISearcherView> {
    return (
      await this.api<{ searcher: ISearcherView }>('GET', `experiments/${experimentId}/searcher`)
    ).searcher;
  }

  /** The search at a glance: null until two trials have a searcher metric. */
  async getSearchView(experimentId: number): Promise<ISearchView | null> {
    return (
      await this.api<{ search: ISearchView | null }>(
        'GET',
        `experiments/${experimentId}/search-view`
      )
    ).search;
  }

  /** Each hyperparameter's share of the variance of the searcher metric. */
  async getImportance(experimentId: number): Promise<IHyperparameterImportance> {
    return await this.api<IHyperparameterImportance>(
      'GET',
      `experiments/${experimentId}/hyperparameter-importance`
    );
  }

  /** The model registry's models, by name. */
  async listModels(options: { archived?: boolean; limit?: number } = {}): Promise<IModel[]> {
    const body = await this.api<{ models: IModel[] }>('GET', 'models', {
      query: { archived: options.archived, limit: options.limit }
    });
    return body.models;
  }

  /** Creates a model (without versions), owned by the user the panel acts as. */
  async createModel(name: string): Promise<IModel> {
    return (await this.api<{ model: IModel }>('POST', 'models', { body: { name } })).model;
  }

  /** Registers a checkpoint as the next version of a model. */
  async createModelVersion(modelName: string, checkpointUuid: string): Promise<IModelVersion> {
    const body = await this.api<{ model_version: IModelVersion }>(
      'POST',
      `models/${encodeURIComponent(modelName)}/versions`,
      { body: { checkpoint_uuid: checkpointUuid } }
    );
    return body.model_version;
  }

  /** An experiment's checkpoints, newest first. */
  async listCheckpoints(experimentId: number): Promise<ICheckpoint[]> {
    const body = await this.api<{ checkpoints: ICheckpoint[] }>(
      'GET',
      `experiments/${experimentId}/checkpoints`
    );
    return body.checkpoints;
  }

  /**
   * Creates an experiment from files on the notebook server: the config at `configPath` and
   * the context directory `contextDir`, both relative to the server's root directory (as the
   * file browser shows them). The server packs the context, so nothing large passes through
   * the browser.
   */
  async createExperimentFromPath(
    configPath: string,
    contextDir: string,
    options: { activate?: boolean } = {}
  ): Promise<IExperiment> {
    const body = await this.json<{ experiment: IExperiment }>('POST', 'launch', {
      body: { config_path: configPath, context_dir: contextDir, activate: options.activate ?? true }
    });
    return body.experiment;
  }

  /** The URL that downloads a checkpoint's files as a .tar.gz (from the notebook server). */
  checkpointDownloadUrl(uuid: string): string {
    return this.extensionUrl(`checkpoints/${encodeURIComponent(uuid)}/download`);
  }

  /**
   * Follows an experiment's metric stream: every metric row of its trials with an id above
   * `afterId` (stored ones first), and its state whenever it changes, until the experiment is
   * over and every row was sent, or `signal` aborts. A dropped connection, or the master asking
   * to be reconnected to, is taken up again after the last row seen.
   *
   * @returns The id of the last row seen.
   * @throws DetHubError when the master refuses the stream, or cannot be reached after
   *   `maxFailures` tries in a row.
   */
  async followExperiment(
    id: number,
    onEvent: (event: ExperimentEvent) => void,
    options: IFollowOptions & { afterId?: number } = {}
  ): Promise<number> {
    const { signal } = options;
    let afterId = options.afterId ?? 0;
    let failures = 0;
    while (!signal?.aborted) {
      let progressed = false;
      let ended = false;
      const failed = await this.readEventStream(
        `api/v1/experiments/${id}/metrics/stream`,
        { after_id: afterId },
        signal,
        sse => {
          progressed = true;
          if (sse.event === 'metrics') {
            const row = JSON.parse(sse.data) as IMetricRow;
            if (row.id > afterId) {
              afterId = row.id;
              onEvent({ kind: 'metrics', row });
            }
          } else if (sse.event === 'state') {
            onEvent({ kind: 'state', state: JSON.parse(sse.data) as IStreamState });
          } else if (sse.event === 'rolled_back') {
            onEvent({ kind: 'rolled_back', rolledBack: JSON.parse(sse.data) as IRolledBack });
          } else if (sse.event === 'end') {
            ended = true;
          }
        }
      );
      if (signal?.aborted) {
        break;
      }
      if (ended) {
        break;
      }
      failures = progressed ? 0 : failures + 1;
      if (failures > (options.maxFailures ?? 10)) {
        throw failed ?? new DetHubError(0, 'the metric stream ended early');
      }
      await sleep(
        Math.min((options.retryDelay ?? 500) * 2 ** Math.max(failures - 1, 0), 5000),
        signal
      );
    }
    return afterId;
  }

  /**
   * One connection to one of the master's Server-Sent Events streams: each event goes to
   * `onEvent` until the stream ends or `signal` aborts.
   *
   * @returns What kept the stream from being read (a status worth retrying, or the notebook
   *   server out of reach), or null when it was read to its end or aborted.
   * @throws DetHubError when the master refuses the stream for good.
   */
  private async readEventStream(
    path: string,
    query: Query,
    signal: AbortSignal | undefined,
    onEvent: (sse: IServerSentEvent) => void
  ): Promise<DetHubError | null> {
    try {
      const response = await this.send('GET', path, {
        query,
        headers: { Accept: 'text/event-stream' },
        signal
      });
      if (!response.ok) {
        const problem = await DetHubError.fromResponse(response);
        if (!RETRYABLE.has(response.status)) {
          throw problem;
        }
        return problem;
      }
      const parser = new ServerSentEventParser();
      await readText(
        response,
        text => {
          for (const sse of parser.push(text)) {
            if (signal?.aborted) {
              return;
            }
            onEvent(sse);
          }
        },
        signal
      );
      return null;
    } catch (error) {
      if (signal?.aborted) {
        return null;
      }
      if (error instanceof DetHubError) {
        throw error;
      }
      return new DetHubError(0, `the notebook server cannot be reached: ${String(error)}`);
    }
  }

  /**
   * Follows a trial's log: every line with an id above `afterId`, as it is written, until the
   * trial has ended and every line was sent, or `signal` aborts. Without `follow`, the lines
   * stored now only.
   *
   * @returns The id of the last line seen.
   */
  async followLogs(
    trialId: number,
    onLines: (lines: ILogLine[]) => void,
    options: IFollowOptions & { afterId?: number; follow?: boolean } = {}
  ): Promise<number> {
    const { signal } = options;
    const follow = options.follow ?? true;
    let afterId = options.afterId ?? 0;
    let failures = 0;
    while (!signal?.aborted) {
      let progressed = false;
      try {
        const response = await this.send('GET', `api/v1/trials/${trialId}/logs`, {
          query: { follow, after_id: afterId },
          signal
        });
        if (!response.ok) {
          const problem = await DetHubError.fromResponse(response);
          if (!RETRYABLE.has(response.status) || ++failures > (options.maxFailures ?? 10)) {
            throw problem;
          }
        } else {
          const parser = new NdjsonParser<ILogLine>();
          const take = (lines: ILogLine[]): void => {
            const fresh = lines.filter(line => line.id > afterId);
            if (fresh.length) {
              progressed = true;
              afterId = fresh[fresh.length - 1].id;
              onLines(fresh);
            }
          };
          await readText(response, text => take(parser.push(text)), signal);
          take(parser.flush());
          // The stream ends by itself once the trial has ended; else the connection broke.
          if (!follow || signal?.aborted || isTerminal((await this.getTrial(trialId)).state)) {
            break;
          }
          failures = progressed ? 0 : failures + 1;
        }
      } catch (error) {
        if (signal?.aborted) {
          break;
        }
        if (error instanceof DetHubError || ++failures > (options.maxFailures ?? 10)) {
          throw error;
        }
      }
      await sleep(
        Math.min((options.retryDelay ?? 500) * 2 ** Math.max(failures - 1, 0), 5000),
        signal
      );
    }
    return afterId;
  }
}
