/**
 * The sidebar's cluster view: the agents with their slots and who holds each, the resource
 * pools and the job queue. It follows the master's cluster stream while it is started (the
 * sidebar starts it while the cluster tab is shown), so it never polls. Free of any widget, so
 * that it is tested on its own.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { DetHubClient } from '../api/client';
import {
  ClusterEvent,
  IAgent,
  IClusterAllocation,
  IClusterState,
  IJob,
  IResourcePool
} from '../api/types';
import { StreamFollower } from './follower';

/** Who holds a slot: the job and its owner, and the trial of an experiment's job. */
export interface ISlotHolder {
  jobId: string;
  owner: string | null;
  experimentId: number | null;
  trialId: number | null;
}

/** The trial a trial's allocation id (`<trial id>.<suffix>`) belongs to, or null. */
export function allocationTrial(allocationId: string): number | null {
  const match = /^(\d+)\./.exec(allocationId);
  return match ? Number(match[1]) : null;
}

/**
 * Who holds the slot given to `allocationId`, as the cluster's open allocations tell; what its
 * id says when it is not among them.
 */
export function slotHolder(
  allocationId: string,
  allocations: readonly IClusterAllocation[]
): ISlotHolder {
  const held = allocations.find(a => a.id === allocationId);
  if (held) {
    return {
      jobId: held.job_id,
      owner: held.owner,
      experimentId: held.experiment_id,
      trialId: held.trial_id
    };
  }
  const trialId = allocationTrial(allocationId);
  return {
    jobId: trialId !== null ? `trial ${trialId}` : allocationId,
    owner: null,
    experimentId: null,
    trialId
  };
}

/** The agents, pools, queue and allocations, as the master's cluster stream keeps them. */
export class ClusterModel {
  constructor(
    readonly client: DetHubClient,
    options: { retryDelay?: number; maxDelay?: number } = {}
  ) {
    this._retryDelay = options.retryDelay ?? 500;
    this._maxDelay = options.maxDelay ?? 30000;
  }

  /** Emitted whenever anything shown changes. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get agents(): readonly IAgent[] {
    return this._state.agents;
  }

  get pools(): readonly IResourcePool[] {
    return this._state.resource_pools;
  }

  get jobs(): readonly IJob[] {
    return this._state.jobs;
  }

  /** The allocations holding or waiting for slots. */
  get allocations(): readonly IClusterAllocation[] {
    return this._state.allocations;
  }

  /** Whether a first snapshot has arrived. */
  get loaded(): boolean {
    return this._loaded;
  }

  /** What went wrong with the stream, or null while it is fine. */
  get error(): string | null {
    return this._follower.error;
  }

  /** Whether the master's cluster stream is followed now. */
  get live(): boolean {
    return this._follower.live;
  }

  /** Who holds the slot given to an allocation. */
  holder(allocationId: string): ISlotHolder {
    return slotHolder(allocationId, this._state.allocations);
  }

  /**
   * Follows the master's cluster: a snapshot, then every change as it happens, until `stop`.
   * Does nothing when already following.
   */
  start(): void {
    this._follower.start((signal, problem) =>
      this.client.followCluster(event => this._onEvent(event, signal), {
        signal,
        retryDelay: this._retryDelay,
        maxDelay: this._maxDelay,
        onProblem: problem
      })
    );
  }

  /** Stops following the master's cluster (what was shown stays shown). */
  stop(): void {
    this._follower.stop();
  }

  /** Follows the cluster anew, from a fresh snapshot. */
  restart(): void {
    this.stop();
    this.start();
  }

  dispose(): void {
    this.stop();
    Signal.clearData(this);
  }

  private _onEvent(event: ClusterEvent, signal: AbortSignal): void {
    if (signal.aborted) {
      return;
    }
    if (event.kind === 'snapshot') {
      this._state = event.state;
      this._loaded = true;
    } else {
      this._state = { ...this._state, ...event.changed };
    }
    this._follower.heard();
    this._changed.emit();
  }

  private _state: IClusterState = { agents: [], resource_pools: [], jobs: [], allocations: [] };
  private _loaded = false;
  private readonly _retryDelay: number;
  private readonly _maxDelay: number;
  private readonly _follower = new StreamFollower(() => this._changed.emit());
  private readonly _changed = new Signal<this, void>(this);
}
