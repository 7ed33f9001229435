/**
 * The sidebar's cluster view: the agents with their slots and who holds each, the resource
 * pools and the job queue.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { DetHubClient } from '../api/client';
import { IAgent, IJob, IResourcePool } from '../api/types';

/** Who holds a slot: the job and its owner, as far as the queue tells. */
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

/** The task a task's allocation id (`task-<task id>.<suffix>`) belongs to, or null. */
export function allocationTask(allocationId: string): number | null {
  const match = /^task-(\d+)\./.exec(allocationId);
  return match ? Number(match[1]) : null;
}

/**
 * Who holds the slot given to `allocationId`: the job of the trial's experiment (the trial's
 * experiment from `trialExperiments`) or of the task, found in `jobs`.
 */
export function slotHolder(
  allocationId: string,
  jobs: readonly IJob[],
  trialExperiments: ReadonlyMap<number, number>
): ISlotHolder {
  const trialId = allocationTrial(allocationId);
  if (trialId !== null) {
    const experimentId = trialExperiments.get(trialId) ?? null;
    const job = jobs.find(j => experimentId !== null && j.experiment_id === experimentId);
    return {
      jobId: job?.job_id ?? (experimentId !== null ? `exp-${experimentId}` : `trial ${trialId}`),
      owner: job?.owner ?? null,
      experimentId,
      trialId
    };
  }
  const taskId = allocationTask(allocationId);
  const job = taskId === null ? undefined : jobs.find(j => j.task_id === taskId);
  return {
    jobId: job?.job_id ?? allocationId,
    owner: job?.owner ?? null,
    experimentId: null,
    trialId: null
  };
}

/** The agents, pools and queue, refreshed on demand. */
export class ClusterModel {
  constructor(readonly client: DetHubClient) {}

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get agents(): readonly IAgent[] {
    return this._agents;
  }

  get pools(): readonly IResourcePool[] {
    return this._pools;
  }

  get jobs(): readonly IJob[] {
    return this._jobs;
  }

  get loaded(): boolean {
    return this._loaded;
  }

  get error(): string | null {
    return this._error;
  }

  /** Who holds the slot given to an allocation. */
  holder(allocationId: string): ISlotHolder {
    return slotHolder(allocationId, this._jobs, this._trialExperiments);
  }

  async refresh(): Promise<void> {
    try {
      const [agents, pools, jobs] = await Promise.all([
        this.client.listAgents(),
        this.client.listResourcePools(),
        this.client.listJobs()
      ]);
      // A trial's experiment never changes: each trial holding a slot is looked up once.
      const unknown = new Set<number>();
      for (const agent of agents) {
        for (const slot of agent.slots) {
          const trialId = slot.allocation_id ? allocationTrial(slot.allocation_id) : null;
          if (trialId !== null && !this._trialExperiments.has(trialId)) {
            unknown.add(trialId);
          }
        }
      }
      await Promise.all(
        [...unknown].map(async id => {
          try {
            this._trialExperiments.set(id, (await this.client.getTrial(id)).experiment_id);
          } catch {
            // Shown by its trial id instead.
          }
        })
      );
      this._agents = agents;
      this._pools = pools;
      this._jobs = jobs;
      this._loaded = true;
      this._error = null;
    } catch (error) {
      this._error = error instanceof Error ? error.message : String(error);
      throw error;
    } finally {
      this._changed.emit();
    }
  }

  private _agents: IAgent[] = [];
  private _pools: IResourcePool[] = [];
  private _jobs: IJob[] = [];
  private _loaded = false;
  private _error: string | null = null;
  private readonly _trialExperiments = new Map<number, number>();
  private readonly _changed = new Signal<this, void>(this);
}
