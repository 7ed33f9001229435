/**
 * Experiments compared in JupyterLab's main area, as on the dashboard's compare page: the best
 * trial of each (by its searcher metric) with its hyperparameters, and those trials' curves on
 * one chart, each experiment in its colour.
 */

import * as React from 'react';

import { DetHubClient } from '../api/client';
import { ITrial } from '../api/types';
import { CompareModel } from '../model/compare';
import { formatMetric } from '../model/experiments';
import { hparamColumns, hparamsText } from '../model/hparams';
import { defaultMetric, ITrace } from '../model/series';
import { ChartView, MetricSection } from './chart';
import { StateBadge } from './common';
import { HparamCells } from './trialTable';

export interface ICompareViewOptions {
  client: DetHubClient;
  /** The experiments to compare (2 to 8). */
  ids: readonly number[];
  /** Opens an experiment's own view. */
  onOpen: (experimentId: number) => void;
}

export class CompareView extends ChartView {
  /** @throws Error when there are too few or too many ids to compare. */
  constructor(options: ICompareViewOptions) {
    super();
    this._options = options;
    this.addClass('jp-DetHub-compareView');
    this.model = new CompareModel(options.client, options.ids);
    this.model.changed.connect(() => this.update(), this);
    this.title.label = `Compare ${this.model.ids.join(', ')}`;
    this.title.caption = `The best trials of experiments ${this.model.ids.join(', ')}`;
  }

  readonly model: CompareModel;

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    super.dispose();
  }

  protected start(): void {
    void this.model.load();
  }

  protected render(): JSX.Element {
    const { model } = this;
    const ids = model.ids.join(' ');
    const names = model.series.metricNames();
    const first = model.compared[0]?.experiment.searcher_metric ?? '';
    const metric =
      this._metric && names.includes(this._metric) ? this._metric : defaultMetric(names, first);
    return (
      <div className="jp-DetHub-view" data-compared={ids} data-loaded={String(model.loaded)}>
        <header className="jp-DetHub-viewHeader">
          <h1>Compare experiments {model.ids.join(', ')}</h1>
          <span className="jp-DetHub-actions">
            <button
              className="jp-mod-styled jp-DetHub-action"
              title="Look at the experiments again"
              onClick={() => void model.load()}
            >
              Reload
            </button>
          </span>
        </header>
        {model.error ? <p className="jp-DetHub-error">{model.error}</p> : null}
        {!model.loaded ? <p className="jp-DetHub-note">Loading the experiments…</p> : null}
        {model.compared.length ? (
          <>
            <section className="jp-DetHub-section">
              <h2>Best trials</h2>
              <p className="jp-DetHub-note">
                Each experiment&apos;s trial with the best value of its searcher metric; their
                curves share the chart below.
              </p>
              <ComparedTable model={model} onOpen={this._options.onOpen} />
            </section>
            <section className="jp-DetHub-section">
              <MetricSection
                metric={metric}
                names={names}
                onPick={name => {
                  this._metric = name;
                  this.update();
                }}
                traces={this._traces(metric)}
                empty="None of these trials has reported this metric."
              />
            </section>
          </>
        ) : null}
      </div>
    );
  }

  private _traces(metric: string | null): ITrace[] {
    // The chart redraws when this array changes: keep it while nothing new was loaded.
    const series = this.model.series;
    if (metric !== this._tracesFor.metric || series !== this._tracesFor.series) {
      this._tracesFor = { metric, series, traces: metric ? this.model.traces(metric) : [] };
    }
    return this._tracesFor.traces;
  }

  private _metric: string | null = null;
  private _tracesFor: { metric: string | null; series: unknown; traces: ITrace[] } = {
    metric: null,
    series: null,
    traces: []
  };
  private readonly _options: ICompareViewOptions;
}

/** A row per experiment: its best trial's metric, hyperparameters that differ and batches. */
function ComparedTable(props: {
  model: CompareModel;
  onOpen: (experimentId: number) => void;
}): JSX.Element {
  const { model } = props;
  const best = model.bestTrials;
  const { columns, fixed } = hparamColumns(best);
  return (
    <>
      <table className="jp-DetHub-table jp-DetHub-compareTable">
        <thead>
          <tr>
            <th>Experiment</th>
            <th>Name</th>
            <th>Owner</th>
            <th>State</th>
            <th>Searcher metric</th>
            <th>Best</th>
            <th>Trial</th>
            {columns.map(name => (
              <th key={name} className="jp-DetHub-hparam">
                {name}
              </th>
            ))}
            <th>Batches</th>
          </tr>
        </thead>
        <tbody>
          {model.compared.map(({ experiment, best: trial, colour }) => (
            <tr
              key={experiment.id}
              data-experiment-id={experiment.id}
              data-trial-id={trial?.id ?? ''}
            >
              <td>
                <span
                  className="jp-DetHub-swatch"
                  style={{ background: colour }}
                  title={`experiment ${experiment.id}'s colour on the chart`}
                />{' '}
                <button
                  className="jp-DetHub-link"
                  title={`Open experiment ${experiment.id}`}
                  onClick={() => props.onOpen(experiment.id)}
                >
                  #{experiment.id}
                </button>
              </td>
              <td>{experiment.name}</td>
              <td>{experiment.owner}</td>
              <td>
                <StateBadge state={experiment.state} />
              </td>
              <td>
                {experiment.searcher_metric} ({experiment.smaller_is_better ? 'lower' : 'higher'} is
                better)
              </td>
              {trial ? (
                <BestCells trial={trial} columns={columns} />
              ) : (
                <td className="jp-DetHub-note" colSpan={3 + columns.length}>
                  no trial has reported {experiment.searcher_metric} yet
                </td>
              )}
            </tr>
          ))}
        </tbody>
      </table>
      {Object.keys(fixed).length ? (
        <p className="jp-DetHub-note jp-DetHub-fixedHparams">
          Every best trial: {hparamsText(fixed)}
        </p>
      ) : null}
    </>
  );
}

function BestCells(props: { trial: ITrial; columns: string[] }): JSX.Element {
  const { trial, columns } = props;
  return (
    <>
      <td className="jp-DetHub-number jp-DetHub-metric">
        {formatMetric(trial.searcher_metric_value)}
      </td>
      <td className="jp-DetHub-number">{trial.id}</td>
      <HparamCells hparams={trial.hparams} columns={columns} />
      <td className="jp-DetHub-number">{trial.steps_completed}</td>
    </>
  );
}
