/**
 * The sidebar's experiments: mine or all, a search box, each row opening on its trials, and a
 * tick per row to compare experiments.
 */

import * as React from 'react';

import { actionLabel } from '../actions';
import { actionsFor, mayChange } from '../model/actions';
import { ExperimentAction, IExperiment, IUser } from '../api/types';
import { COMPARE_MAX, COMPARE_MIN, CompareSelection } from '../model/compare';
import { ExperimentListModel, formatMetric } from '../model/experiments';
import { hparamsText } from '../model/hparams';
import { Progress, Sparkline, StateBadge } from './common';

export interface IExperimentListProps {
  model: ExperimentListModel;
  /** Who looks: actions are offered on their own experiments only, on all to an admin. */
  viewer: IUser | null;
  /** Opens the experiment's view in the main area. */
  onOpen: (experiment: IExperiment) => void;
  onAction: (experiment: IExperiment, action: ExperimentAction) => void;
  onPriority: (experiment: IExperiment) => void;
  /** Reloads the list from a fresh snapshot. */
  onRefresh: () => void;
  /** Opens the quickstart notebook of the server's root. */
  onOpenQuickstart: () => void;
  /** The experiments ticked to compare. */
  comparing: CompareSelection;
  /** Opens the comparison of the ticked experiments in the main area. */
  onCompare: (ids: number[]) => void;
}

export function ExperimentList(props: IExperimentListProps): JSX.Element {
  const { model } = props;
  const shown = model.shown;
  return (
    <div className="jp-DetHub-experimentList" data-live={model.live ? 'true' : 'false'}>
      <div className="jp-DetHub-toolbar">
        <div className="jp-DetHub-scope" role="group" aria-label="Whose experiments">
          {(['mine', 'all'] as const).map(scope => (
            <button
              key={scope}
              className="jp-DetHub-scopeButton"
              aria-pressed={model.scope === scope}
              data-scope={scope}
              onClick={() => {
                // The list follows the new scope by itself.
                model.scope = scope;
              }}
            >
              {scope === 'mine' ? 'Mine' : 'All'}
            </button>
          ))}
        </div>
        <SearchBox
          initial={model.query}
          onChange={query => {
            model.query = query;
          }}
        />
        <button
          className="jp-DetHub-refresh"
          title="Reload the list (it follows the master by itself)"
          aria-label="Refresh"
          onClick={props.onRefresh}
        >
          ↻
        </button>
      </div>
      <CompareBar comparing={props.comparing} onCompare={props.onCompare} />
      {model.scope === 'mine' && model.user === null ? (
        <p className="jp-DetHub-note">
          The master did not say who you are: all experiments are listed.
        </p>
      ) : null}
      {model.error ? <p className="jp-DetHub-error">{model.error}</p> : null}
      {!model.loaded && !model.error ? (
        <p className="jp-DetHub-note">Loading experiments…</p>
      ) : null}
      {model.loaded && shown.length === 0 && model.experiments.length > 0 ? (
        <p className="jp-DetHub-note">No experiment matches the filter.</p>
      ) : null}
      {model.loaded && model.experiments.length === 0 ? (
        <div className="jp-DetHub-note jp-DetHub-empty">
          <p>
            No experiments yet. The quickstart notebook trains a small search from a notebook cell;
            or right-click an experiment config in the file browser, such as
            examples/core_api/const.yaml, and create it there.
          </p>
          <button
            className="jp-mod-styled jp-mod-accept jp-DetHub-quickstart"
            onClick={props.onOpenQuickstart}
          >
            Open the quickstart
          </button>
        </div>
      ) : null}
      <ul className="jp-DetHub-experiments">
        {shown.map(experiment => (
          <ExperimentRow key={experiment.id} experiment={experiment} {...props} />
        ))}
      </ul>
    </div>
  );
}

/** What is ticked to compare, and the button that compares it. */
function CompareBar(props: {
  comparing: CompareSelection;
  onCompare: (ids: number[]) => void;
}): JSX.Element | null {
  const { comparing } = props;
  const ids = comparing.ids;
  if (ids.length === 0) {
    return null;
  }
  return (
    <div className="jp-DetHub-compareBar" data-ticked={ids.join(' ')}>
      <span className="jp-DetHub-secondary">
        {ids.length < COMPARE_MIN
          ? `Tick one more experiment to compare (${COMPARE_MAX} at most).`
          : `${ids.length} experiments ticked${comparing.full ? ' (the most there can be)' : ''}.`}
      </span>
      <button
        className="jp-mod-styled jp-mod-accept jp-DetHub-compare"
        disabled={!comparing.ready}
        title="Open the best trial of each ticked experiment side by side"
        onClick={() => props.onCompare(ids)}
      >
        Compare
      </button>
      <button className="jp-mod-styled jp-DetHub-uncompare" onClick={() => comparing.clear()}>
        Clear
      </button>
    </div>
  );
}

/** The filter box; it keeps what is typed itself, the list follows. */
function SearchBox(props: { initial: string; onChange: (query: string) => void }): JSX.Element {
  const [query, setQuery] = React.useState(props.initial);
  return (
    <input
      className="jp-DetHub-search jp-mod-styled"
      type="search"
      placeholder="Filter"
      aria-label="Filter experiments by name, state, owner or id"
      title="Filter by name, state, owner or id"
      value={query}
      onChange={event => {
        setQuery(event.target.value);
        props.onChange(event.target.value);
      }}
    />
  );
}

function ExperimentRow(props: IExperimentListProps & { experiment: IExperiment }): JSX.Element {
  const { experiment, model } = props;
  const expanded = model.isExpanded(experiment.id);
  const best = model.best(experiment.id);
  return (
    <li
      className={`jp-DetHub-experiment${expanded ? ' jp-mod-expanded' : ''}`}
      data-experiment-id={experiment.id}
      data-state={experiment.state}
    >
      <div
        className="jp-DetHub-experimentSummary"
        role="button"
        tabIndex={0}
        aria-expanded={expanded}
        onClick={() => void model.toggle(experiment.id)}
        onKeyDown={event => {
          if (event.key === 'Enter' || event.key === ' ') {
            event.preventDefault();
            void model.toggle(experiment.id);
          }
        }}
      >
        <div className="jp-DetHub-line">
          <CompareTick experiment={experiment} comparing={props.comparing} />
          <span className="jp-DetHub-caret">{expanded ? '▾' : '▸'}</span>
          <span className="jp-DetHub-id">#{experiment.id}</span>
          <span className="jp-DetHub-name" title={experiment.description || experiment.name}>
            {experiment.name}
          </span>
          <StateBadge state={experiment.state} />
        </div>
        <div className="jp-DetHub-line jp-DetHub-secondary">
          <Progress value={experiment.progress} />
          <span className="jp-DetHub-best" title={`best ${experiment.searcher_metric}`}>
            best {formatMetric(best)}
          </span>
          <span className="jp-DetHub-owner">{experiment.owner}</span>
        </div>
      </div>
      {expanded ? <ExperimentDetail {...props} /> : null}
    </li>
  );
}

/** The tick that puts an experiment among those to compare (it opens no row). */
function CompareTick(props: { experiment: IExperiment; comparing: CompareSelection }): JSX.Element {
  const { experiment, comparing } = props;
  const ticked = comparing.has(experiment.id);
  return (
    <input
      type="checkbox"
      className="jp-DetHub-compareTick"
      aria-label={`Compare experiment ${experiment.id}`}
      title={
        !ticked && comparing.full
          ? `${COMPARE_MAX} experiments are ticked to compare already`
          : `Tick ${COMPARE_MIN} to ${COMPARE_MAX} experiments to compare their best trials`
      }
      checked={ticked}
      disabled={!ticked && comparing.full}
      onClick={event => event.stopPropagation()}
      onKeyDown={event => event.stopPropagation()}
      onChange={event => comparing.set(experiment.id, event.target.checked)}
    />
  );
}

function ExperimentDetail(props: IExperimentListProps & { experiment: IExperiment }): JSX.Element {
  const { experiment, model } = props;
  const trials = model.trials(experiment.id);
  return (
    <div className="jp-DetHub-experimentDetail">
      <div className="jp-DetHub-actions">
        <button
          className="jp-mod-styled jp-mod-accept jp-DetHub-open"
          onClick={() => props.onOpen(experiment)}
        >
          Open
        </button>
        {actionsFor(experiment, props.viewer).map(action => (
          <button
            key={action}
            className={`jp-mod-styled jp-DetHub-action${action === 'kill' ? ' jp-mod-warn' : ''}`}
            data-action={action}
            onClick={() => props.onAction(experiment, action)}
          >
            {actionLabel(action)}
          </button>
        ))}
        {mayChange(experiment, props.viewer) ? (
          <button
            className="jp-mod-styled jp-DetHub-action"
            data-action="priority"
            title={`Priority ${experiment.priority} (1 runs first)`}
            onClick={() => props.onPriority(experiment)}
          >
            Priority
          </button>
        ) : null}
      </div>
      {trials === undefined ? (
        <p className="jp-DetHub-note">Loading trials…</p>
      ) : trials.length === 0 ? (
        <p className="jp-DetHub-note">No trials yet.</p>
      ) : (
        <ul className="jp-DetHub-trials">
          {trials.map(trial => (
            <li key={trial.id} className="jp-DetHub-trial" data-trial-id={trial.id}>
              <div className="jp-DetHub-line">
                <span className="jp-DetHub-id">trial {trial.id}</span>
                <StateBadge state={trial.state} runState={trial.run_state} />
                <span className="jp-DetHub-metricValue" title={experiment.searcher_metric}>
                  {formatMetric(trial.searcher_metric_value)}
                </span>
              </div>
              <div className="jp-DetHub-line">
                <Sparkline
                  points={model.curve(trial.id)}
                  width={56}
                  title={`${experiment.searcher_metric} of trial ${trial.id}`}
                />
                <span className="jp-DetHub-hparams" title={hparamsText(trial.hparams)}>
                  {hparamsText(trial.hparams) || 'no hyperparameters'}
                </span>
              </div>
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
