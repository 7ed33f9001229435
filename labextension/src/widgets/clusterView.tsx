/** The sidebar's cluster: resource pools, agents with their slots and holders, the job queue. */

import * as React from 'react';

import { ClusterModel } from '../model/cluster';

export function ClusterView(props: {
  model: ClusterModel;
  onOpenExperiment: (id: number) => void;
}): JSX.Element {
  const { model } = props;
  if (!model.loaded) {
    return <p className="jp-DetHub-note">{model.error ?? 'Loading the cluster…'}</p>;
  }
  return (
    <div className="jp-DetHub-cluster">
      {model.error ? <p className="jp-DetHub-error">{model.error}</p> : null}
      <h3>Resource pools</h3>
      <table className="jp-DetHub-pools">
        <thead>
          <tr>
            <th>Pool</th>
            <th>Slots used</th>
            <th>Scheduler</th>
          </tr>
        </thead>
        <tbody>
          {model.pools.map(pool => (
            <tr key={pool.name} data-pool={pool.name}>
              <td>
                {pool.name}
                {pool.default ? ' (default)' : ''}
              </td>
              <td>
                {pool.slots_used} / {pool.slots_total} {pool.slot_type ?? ''}
              </td>
              <td>{pool.scheduler}</td>
            </tr>
          ))}
        </tbody>
      </table>

      <h3>Agents</h3>
      {model.agents.length === 0 ? <p className="jp-DetHub-note">No agent is connected.</p> : null}
      {model.agents.map(agent => {
        const used = agent.slots.filter(s => s.allocation_id).length;
        return (
          <div key={agent.id} className="jp-DetHub-agent" data-agent-id={agent.id}>
            <div className="jp-DetHub-line">
              <strong>{agent.id}</strong>
              <span className="jp-DetHub-secondary">
                {agent.type} · {agent.resource_pool}
                {agent.enabled ? '' : ' · disabled'}
                {agent.connected ? '' : ' · disconnected'}
              </span>
              <span className="jp-DetHub-usage">
                {used} / {agent.slots.length} slots in use
              </span>
            </div>
            <ul className="jp-DetHub-slots">
              {agent.slots.map(slot => {
                const holder = slot.allocation_id ? model.holder(slot.allocation_id) : null;
                return (
                  <li
                    key={slot.id}
                    className={`jp-DetHub-slot${holder ? ' jp-mod-used' : ''}`}
                    data-slot-id={slot.id}
                    title={slot.description}
                  >
                    <code>
                      {slot.type}:{slot.id}
                    </code>{' '}
                    {holder ? (
                      <span className="jp-DetHub-holder">
                        {holder.experimentId !== null ? (
                          <a
                            href="#"
                            onClick={event => {
                              event.preventDefault();
                              props.onOpenExperiment(holder.experimentId as number);
                            }}
                          >
                            {holder.jobId}
                          </a>
                        ) : (
                          holder.jobId
                        )}
                        {holder.trialId !== null ? ` trial ${holder.trialId}` : ''}
                        {holder.owner ? ` of ${holder.owner}` : ''}
                      </span>
                    ) : (
                      <span className="jp-DetHub-free">free</span>
                    )}
                  </li>
                );
              })}
            </ul>
          </div>
        );
      })}

      <h3>Job queue</h3>
      {model.jobs.length === 0 ? (
        <p className="jp-DetHub-note">
          The queue is empty: no job is waiting for or holding slots.
        </p>
      ) : (
        <table className="jp-DetHub-jobs">
          <thead>
            <tr>
              <th>#</th>
              <th>Job</th>
              <th>Owner</th>
              <th title="Priority: 1 runs first">Prio.</th>
              <th title="Slots held / asked for">Slots</th>
            </tr>
          </thead>
          <tbody>
            {model.jobs.map(job => (
              <tr key={job.job_id} data-job-id={job.job_id} data-state={job.state}>
                <td>{job.queue_position ?? ''}</td>
                <td>
                  {job.experiment_id !== null ? (
                    <a
                      href="#"
                      onClick={event => {
                        event.preventDefault();
                        props.onOpenExperiment(job.experiment_id as number);
                      }}
                    >
                      {job.job_id}
                    </a>
                  ) : (
                    job.job_id
                  )}{' '}
                  <span className="jp-DetHub-secondary">
                    {job.state.replace('_', ' ').toLowerCase()}
                  </span>
                  <div className="jp-DetHub-jobName" title={job.name}>
                    {job.name}
                  </div>
                </td>
                <td>{job.owner}</td>
                <td>{job.priority}</td>
                <td>
                  {job.slots_allocated} / {job.slots_requested}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}
