/**
 * An experiment in JupyterLab's main area: its metric chart (live; only the trials ticked in
 * the trials table when some are), its trials (sorted, filtered, a column per hyperparameter),
 * an ASHA search's rungs, the search view (parallel coordinates, each hyperparameter against
 * the metric, and hyperparameter importance), checkpoints (to download, to load in the active
 * notebook, or to register in the model registry) and a trial's log, followed while it runs.
 */

import * as React from 'react';

import { actionLabel } from '../actions';
import { actionsFor, mayChange } from '../model/actions';
import { DetHubClient } from '../api/client';
import {
  ExperimentAction,
  ICheckpoint,
  IExperiment,
  IModelVersion,
  ISearcherView,
  IUser,
  isTerminal
} from '../api/types';
import { ExperimentModel, TrialLogModel } from '../model/experiment';
import { bestMetric, formatMetric } from '../model/experiments';
import { versionLabel } from '../model/registry';
import { defaultMetric, ITrace } from '../model/series';
import { trialColours } from '../model/trialColours';
import { drawnTraces, TrialTable } from '../model/trialTable';
import { ChartView, MetricSection } from './chart';
import { formatBytes, formatTime, Progress, StateBadge } from './common';
import { SearchSection } from './searchView';
import { TrialTableSection } from './trialTable';

export interface IExperimentViewOptions {
  client: DetHubClient;
  experimentId: number;
  onAction: (experiment: IExperiment, action: ExperimentAction) => Promise<IExperiment | null>;
  onPriority: (experiment: IExperiment) => Promise<void>;
  /** Who looks (null until known): actions are offered to the owner and admins only. */
  viewer: () => IUser | null;
  /** Puts code that loads the checkpoint into the active notebook. */
  onInsertCode: (uuid: string) => void;
  /** Registers the checkpoint in the model registry (after asking under which model). */
  onRegister: (experiment: IExperiment, checkpoint: ICheckpoint) => Promise<IModelVersion | null>;
}

export class ExperimentView extends ChartView {
  constructor(options: IExperimentViewOptions) {
    super();
    this._options = options;
    this.addClass('jp-DetHub-experimentView');
    this.model = new ExperimentModel(options.client, options.experimentId);
    this.logs = new TrialLogModel(options.client);
    this.model.changed.connect(this._onChanged, this);
    this.logs.changed.connect(this._onChanged, this);
    this.table.changed.connect(this._onChanged, this);
  }

  readonly model: ExperimentModel;
  readonly logs: TrialLogModel;
  /** How the trials table is sorted and filtered, and which trials the chart draws. */
  readonly table = new TrialTable();

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    this.logs.dispose();
    this.table.dispose();
    super.dispose();
  }

  protected start(): void {
    void this.model.start();
  }

  protected render(): JSX.Element {
    const { model, logs } = this;
    const experiment = model.experiment;
    if (!experiment) {
      return (
        <div className="jp-DetHub-view">
          <p className={model.error ? 'jp-DetHub-error' : 'jp-DetHub-note'}>
            {model.error ?? `Loading experiment ${model.id}…`}
          </p>
        </div>
      );
    }
    const names = model.series.metricNames();
    const metric =
      this._metric && names.includes(this._metric)
        ? this._metric
        : defaultMetric(names, experiment.searcher_metric);
    const best = bestMetric(model.trials, experiment.smaller_is_better);
    return (
      <div
        className="jp-DetHub-view"
        data-experiment-id={experiment.id}
        data-state={experiment.state}
      >
        <header className="jp-DetHub-viewHeader">
          <h1>
            <span className="jp-DetHub-id">#{experiment.id}</span> {experiment.name}
          </h1>
          <StateBadge state={experiment.state} />
          <Progress value={experiment.progress} />
          <span className="jp-DetHub-secondary">
            {experiment.owner} · {experiment.num_trials} trial
            {experiment.num_trials === 1 ? '' : 's'} · best {experiment.searcher_metric}{' '}
            {formatMetric(best)} · priority {experiment.priority}
            {model.live ? ' · live' : ''}
          </span>
          <span className="jp-DetHub-actions">
            {actionsFor(experiment, this._options.viewer()).map(action => (
              <button
                key={action}
                className={`jp-mod-styled jp-DetHub-action${action === 'kill' ? ' jp-mod-warn' : ''}`}
                data-action={action}
                onClick={() => void this._act(experiment, action)}
              >
                {actionLabel(action)}
              </button>
            ))}
            {isTerminal(experiment.state) ||
            !mayChange(experiment, this._options.viewer()) ? null : (
              <button
                className="jp-mod-styled jp-DetHub-action"
                data-action="priority"
                onClick={() =>
                  void this._options.onPriority(experiment).then(() => this.model.refresh())
                }
              >
                Priority
              </button>
            )}
          </span>
        </header>
        {model.error ? <p className="jp-DetHub-error">{model.error}</p> : null}

        <section className="jp-DetHub-section">
          <MetricSection
            metric={metric}
            names={names}
            onPick={name => {
              this._metric = name;
              this.update();
            }}
            traces={this._traces(metric)}
            empty={
              this.table.ticked.size
                ? 'The ticked trials have no reports of this metric yet.'
                : undefined
            }
          />
        </section>

        <TrialTableSection
          trials={model.trials}
          table={this.table}
          metric={experiment.searcher_metric}
          colours={this._colours()}
          onLogs={trialId => logs.show(trialId)}
        />

        {model.searcher?.rungs ? (
          <RungTable searcher={model.searcher} metric={experiment.searcher_metric} />
        ) : null}

        {model.search ? (
          <SearchSection
            search={model.search}
            importance={model.importance}
            importanceError={model.importanceError}
          />
        ) : null}

        <section className="jp-DetHub-section">
          <h2>Checkpoints</h2>
          {model.checkpoints.length === 0 ? (
            <p className="jp-DetHub-note">No checkpoints yet.</p>
          ) : (
            <table className="jp-DetHub-table jp-DetHub-checkpointTable">
              <thead>
                <tr>
                  <th>UUID</th>
                  <th>Trial</th>
                  <th>Batches</th>
                  <th>State</th>
                  <th>Size</th>
                  <th>Reported</th>
                  <th />
                </tr>
              </thead>
              <tbody>
                {model.checkpoints.map(checkpoint => (
                  <tr key={checkpoint.uuid} data-uuid={checkpoint.uuid}>
                    <td>
                      <code title={checkpoint.uuid}>{checkpoint.uuid}</code>
                    </td>
                    <td>{checkpoint.trial_id}</td>
                    <td>{checkpoint.steps_completed}</td>
                    <td>{checkpoint.state}</td>
                    <td>{formatBytes(checkpoint.size)}</td>
                    <td>{formatTime(checkpoint.report_time)}</td>
                    <td className="jp-DetHub-checkpointActions">
                      {checkpoint.state === 'COMPLETED' ? (
                        <>
                          <a
                            className="jp-DetHub-download"
                            href={this._options.client.checkpointDownloadUrl(checkpoint.uuid)}
                            download={`checkpoint-${checkpoint.uuid}.tar.gz`}
                          >
                            Download
                          </a>
                          <button
                            className="jp-mod-styled jp-DetHub-insertCode"
                            title={`Insert det_hub.load_checkpoint("${checkpoint.uuid}") in the active notebook`}
                            onClick={() => this._options.onInsertCode(checkpoint.uuid)}
                          >
                            Insert code to load
                          </button>
                          <button
                            className="jp-mod-styled jp-DetHub-register"
                            title="Register this checkpoint as a version of a model in the model registry"
                            onClick={() => void this._register(experiment, checkpoint)}
                          >
                            Register
                          </button>
                        </>
                      ) : null}
                      {model.registered(checkpoint.uuid).map(version => (
                        <span
                          key={version.id}
                          className="jp-DetHub-registered"
                          data-model={version.model_name}
                          data-version={version.version}
                          title={`Registered as version ${version.version} of model ${version.model_name}`}
                        >
                          {versionLabel(version)}
                        </span>
                      ))}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </section>

        <section className="jp-DetHub-section">
          <h2>
            Logs{' '}
            <select
              aria-label="Trial"
              value={logs.trialId ?? ''}
              onChange={event => logs.show(event.target.value ? Number(event.target.value) : null)}
            >
              <option value="">(choose a trial)</option>
              {model.trials.map(trial => (
                <option key={trial.id} value={trial.id}>
                  trial {trial.id}
                </option>
              ))}
            </select>{' '}
            <label className="jp-DetHub-follow">
              <input
                type="checkbox"
                checked={logs.follow}
                onChange={event => logs.setFollow(event.target.checked)}
              />{' '}
              follow
            </label>
            {logs.reading && logs.follow ? (
              <span className="jp-DetHub-secondary"> following…</span>
            ) : null}
          </h2>
          {logs.error ? <p className="jp-DetHub-error">{logs.error}</p> : null}
          <LogLines lines={logs.lines.map(l => l.message)} follow={logs.follow} />
        </section>
      </div>
    );
  }

  /** Each trial's colour, the same in the table and on the chart. */
  private _colours(): ReadonlyMap<number, string> {
    const ids = this.model.trials.map(t => t.id).join(' ');
    if (ids !== this._coloursFor.ids) {
      this._coloursFor = { ids, colours: trialColours(this.model.trials.map(t => t.id)) };
    }
    return this._coloursFor.colours;
  }

  /** The chart's curves of `metric`: the ticked trials' (all when none is), in their colours. */
  private _traces(metric: string | null): ITrace[] {
    // The chart redraws when this array changes: keep it while nothing new has arrived.
    const revision = this.model.series.revision;
    const colours = this._colours();
    const ticked = this.table.ticked;
    const known = this._tracesFor;
    if (
      metric !== known.metric ||
      revision !== known.revision ||
      colours !== known.colours ||
      ticked !== known.ticked
    ) {
      this._tracesFor = {
        metric,
        revision,
        colours,
        ticked,
        traces: metric ? drawnTraces(this.model.series.traces(metric), ticked, colours) : []
      };
    }
    return this._tracesFor.traces;
  }

  private async _register(experiment: IExperiment, checkpoint: ICheckpoint): Promise<void> {
    const version = await this._options.onRegister(experiment, checkpoint);
    if (version) {
      this.model.noteRegistered(version);
    }
  }

  private async _act(experiment: IExperiment, action: ExperimentAction): Promise<void> {
    const updated = await this._options.onAction(experiment, action);
    if (updated) {
      this.model.update(updated);
    }
  }

  private _onChanged(): void {
    if (this.model.experiment) {
      const { id, name, state } = this.model.experiment;
      this.title.label = `Experiment ${id}`;
      this.title.caption = `${name} (${state})`;
    }
    this.update();
  }

  private _metric: string | null = null;
  private _coloursFor: { ids: string; colours: ReadonlyMap<number, string> } = {
    ids: '',
    colours: new Map()
  };
  private _tracesFor: {
    metric: string | null;
    revision: number;
    colours: ReadonlyMap<number, string> | null;
    ticked: ReadonlySet<number> | null;
    traces: ITrace[];
  } = { metric: null, revision: -1, colours: null, ticked: null, traces: [] };
  private readonly _options: IExperimentViewOptions;
}

/**
 * An ASHA search's rungs, one row per bracket and rung: its length, how many trials reported
 * there and were promoted past it, its best result, and the trials there (best first) and on
 * their way to it.
 */
function RungTable(props: { searcher: ISearcherView; metric: string }): JSX.Element | null {
  const { searcher, metric } = props;
  const table = searcher.rungs;
  if (!table) {
    return null;
  }
  const brackets = table.brackets.length > 1;
  const trialList = (ids: number[]): string => (ids.length ? ids.join(', ') : '–');
  return (
    <section className="jp-DetHub-section">
      <h2>
        Rungs{' '}
        <span className="jp-DetHub-secondary">
          {searcher.name}, divisor {table.divisor}
          {searcher.waiting_trials.length
            ? ` · waiting at a rung: trial ${searcher.waiting_trials.join(', ')}`
            : ''}
          {searcher.shutdown ? ' · search done' : ''}
        </span>
      </h2>
      <table className="jp-DetHub-table jp-DetHub-rungTable">
        <thead>
          <tr>
            {brackets ? <th>Bracket</th> : null}
            <th>Rung</th>
            <th>Length</th>
            <th>Reported</th>
            <th>Promoted</th>
            <th>Best {metric}</th>
            <th>Trials (best first)</th>
            <th>Training</th>
          </tr>
        </thead>
        <tbody>
          {table.brackets.flatMap(bracket =>
            bracket.rungs.map(rung => (
              <tr
                key={`${bracket.index}-${rung.index}`}
                data-bracket={bracket.index}
                data-rung={rung.index}
              >
                {brackets ? <td>{bracket.index}</td> : null}
                <td>{rung.index}</td>
                <td>{rung.length}</td>
                <td>{rung.reported}</td>
                <td>{rung.promoted}</td>
                <td>{formatMetric(rung.best_metric)}</td>
                <td className="jp-DetHub-trialIds">{trialList(rung.trial_ids)}</td>
                <td>{trialList(rung.training)}</td>
              </tr>
            ))
          )}
        </tbody>
      </table>
    </section>
  );
}

/** A log's lines; while following, kept scrolled to the end unless scrolled up. */
function LogLines(props: { lines: string[]; follow: boolean }): JSX.Element {
  const node = React.useRef<HTMLPreElement>(null);
  const stick = React.useRef(true);
  React.useEffect(() => {
    const pre = node.current;
    if (pre && props.follow && stick.current) {
      pre.scrollTop = pre.scrollHeight;
    }
  });
  return (
    <pre
      className="jp-DetHub-logs"
      ref={node}
      data-lines={props.lines.length}
      onScroll={event => {
        const pre = event.currentTarget;
        stick.current = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
      }}
    >
      {props.lines.join('\n')}
    </pre>
  );
}
