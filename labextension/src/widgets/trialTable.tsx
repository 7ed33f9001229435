/**
 * An experiment's trials as a table: a column per hyperparameter that differs between them,
 * the searcher metric, state, batches and restarts; sorted by a click on a heading, filtered by
 * state and by words, and with a tick per trial to draw only the ticked ones on the chart, each
 * in the colour it has there.
 */

import * as React from 'react';

import { ITrial } from '../api/types';
import { formatMetric } from '../model/experiments';
import { flattenHparams, hparamColumns, hparamsText, shortValue } from '../model/hparams';
import { hparamColumn, TrialColumn, TrialTable } from '../model/trialTable';
import { Progress, StateBadge } from './common';

export interface ITrialTableProps {
  trials: readonly ITrial[];
  table: TrialTable;
  /** The experiment's searcher metric, the heading of its column. */
  metric: string;
  /** Each trial's colour on the chart. */
  colours: ReadonlyMap<number, string>;
  onLogs: (trialId: number) => void;
}

/** A heading that sorts the table by its column, and shows which way it is sorted. */
function SortHeading(props: {
  table: TrialTable;
  column: TrialColumn;
  label: string;
  className?: string;
}): JSX.Element {
  const { table, column, label } = props;
  const sorted = table.sort.column === column;
  const direction = sorted ? (table.sort.descending ? 'descending' : 'ascending') : 'none';
  return (
    <th className={props.className} aria-sort={direction} data-column={column}>
      <button
        className="jp-DetHub-sortButton"
        title={`Sort by ${label}${sorted && !table.sort.descending ? ', highest first' : ''}`}
        onClick={() => table.sortBy(column)}
      >
        {label}
        <span className="jp-DetHub-sortMark">
          {sorted ? (table.sort.descending ? ' ▼' : ' ▲') : ''}
        </span>
      </button>
    </th>
  );
}

/** The filter box; it keeps what is typed itself, the table follows. */
function TrialQuery(props: { table: TrialTable }): JSX.Element {
  const [query, setQuery] = React.useState(props.table.filter.query);
  return (
    <input
      className="jp-DetHub-trialQuery jp-mod-styled"
      type="search"
      placeholder="Filter trials"
      aria-label="Filter trials by id, state or hyperparameter"
      title="Words each found in a trial's state or hyperparameters (lr=0.1), or its id"
      value={query}
      onChange={event => {
        setQuery(event.target.value);
        props.table.query = event.target.value;
      }}
    />
  );
}

export function TrialTableSection(props: ITrialTableProps): JSX.Element {
  const { trials, table, metric, colours } = props;
  const { columns, fixed } = React.useMemo(() => hparamColumns(trials), [trials]);
  const rows = table.rows(trials);
  const ticked = table.ticked;
  return (
    <section className="jp-DetHub-section jp-DetHub-trials-section">
      <h2>Trials</h2>
      {trials.length === 0 ? (
        <p className="jp-DetHub-note">No trials yet.</p>
      ) : (
        <>
          <div className="jp-DetHub-tableTools">
            <label>
              State{' '}
              <select
                className="jp-DetHub-trialState"
                aria-label="List the trials in this state"
                value={table.filter.state}
                onChange={event => {
                  table.state = event.target.value;
                }}
              >
                <option value="">all</option>
                {table.states(trials).map(state => (
                  <option key={state} value={state}>
                    {state}
                  </option>
                ))}
              </select>
            </label>
            <TrialQuery table={table} />
            <span className="jp-DetHub-secondary jp-DetHub-trialCount">
              {rows.length === trials.length
                ? `${trials.length} trial${trials.length === 1 ? '' : 's'}`
                : `listing ${rows.length} of ${trials.length} trials`}
              {' · '}
              {ticked.size
                ? `the chart draws the ${ticked.size} ticked`
                : 'tick trials to draw only them on the chart'}
            </span>
            {ticked.size ? (
              <button className="jp-mod-styled jp-DetHub-untick" onClick={() => table.untickAll()}>
                Draw every trial
              </button>
            ) : null}
          </div>
          {Object.keys(fixed).length ? (
            <p className="jp-DetHub-note jp-DetHub-fixedHparams">
              Every trial: {hparamsText(fixed)}
            </p>
          ) : null}
          <table className="jp-DetHub-table jp-DetHub-trialTable">
            <thead>
              <tr>
                <th className="jp-DetHub-pick" title="Draw only the ticked trials on the chart">
                  Chart
                </th>
                <SortHeading table={table} column="id" label="Trial" />
                <SortHeading table={table} column="state" label="State" />
                {columns.map(name => (
                  <SortHeading
                    key={name}
                    table={table}
                    column={hparamColumn(name)}
                    label={name}
                    className="jp-DetHub-hparam"
                  />
                ))}
                <SortHeading table={table} column="batches" label="Batches" />
                <SortHeading table={table} column="progress" label="Progress" />
                <SortHeading table={table} column="metric" label={metric} />
                <SortHeading table={table} column="restarts" label="Restarts" />
                <th />
              </tr>
            </thead>
            <tbody>
              {rows.map(trial => {
                const colour = colours.get(trial.id);
                return (
                  <tr
                    key={trial.id}
                    data-trial-id={trial.id}
                    data-state={trial.state}
                    className={ticked.has(trial.id) ? 'jp-mod-ticked' : undefined}
                  >
                    <td className="jp-DetHub-pick">
                      <input
                        type="checkbox"
                        aria-label={`Draw trial ${trial.id} on the chart`}
                        checked={ticked.has(trial.id)}
                        onChange={event => table.tick(trial.id, event.target.checked)}
                      />
                      <span
                        className="jp-DetHub-swatch"
                        style={{ background: colour }}
                        title={`trial ${trial.id}'s colour on the chart`}
                      />
                    </td>
                    <td>{trial.id}</td>
                    <td>
                      <StateBadge state={trial.state} runState={trial.run_state} />
                    </td>
                    <HparamCells hparams={trial.hparams} columns={columns} />
                    <td className="jp-DetHub-number">{trial.steps_completed}</td>
                    <td>
                      <Progress value={trial.progress} />
                    </td>
                    <td className="jp-DetHub-number jp-DetHub-metric">
                      {formatMetric(trial.searcher_metric_value)}
                    </td>
                    <td className="jp-DetHub-number">{trial.restarts}</td>
                    <td>
                      <button className="jp-mod-styled" onClick={() => props.onLogs(trial.id)}>
                        Logs
                      </button>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </>
      )}
    </section>
  );
}

/** A trial's cells under the hyperparameter columns: each value short, in full on hover. */
export function HparamCells(props: {
  hparams: Record<string, unknown>;
  columns: string[];
}): JSX.Element {
  const flat = flattenHparams(props.hparams);
  return (
    <>
      {props.columns.map(name => (
        <td
          key={name}
          className="jp-DetHub-hparam"
          data-name={name}
          title={JSON.stringify(flat[name] ?? null)}
        >
          {shortValue(flat[name] ?? null)}
        </td>
      ))}
    </>
  );
}
