/**
 * A search at a glance in the experiment view: parallel coordinates over the trials'
 * hyperparameters and searcher metric, each hyperparameter against the metric, and how much
 * each one explains the metric. Drawn from the master's search view and importance, the same
 * the dashboard's experiment page draws.
 */

import * as React from 'react';

import { IHyperparameterImportance, ISearchScatter, ISearchView } from '../api/types';
import { loadPlotly, themeColor, usePlot } from './chart';

type PlotlyModule = Awaited<ReturnType<typeof loadPlotly>>;
type PlotData = Parameters<PlotlyModule['react']>[1];
type PlotLayout = Parameters<PlotlyModule['react']>[2];

/** One Plotly figure, drawn again when its data or layout change. */
function Plot(props: {
  data: unknown[];
  layout: Record<string, unknown>;
  className: string;
  name: string;
}): JSX.Element {
  const node = React.useRef<HTMLDivElement>(null);
  const { data, layout } = props;
  usePlot(
    node,
    (Plotly, div) => {
      const font = themeColor('--jp-ui-font-color1', '#222');
      void Plotly.react(
        div,
        data as PlotData,
        {
          autosize: true,
          paper_bgcolor: 'rgba(0,0,0,0)',
          plot_bgcolor: 'rgba(0,0,0,0)',
          font: { color: font, size: 11 },
          ...layout
        } as PlotLayout,
        { responsive: true, displaylogo: false }
      );
    },
    [data, layout]
  );
  return <div className={props.className} ref={node} data-name={props.name} />;
}

function scatterFigure(
  scatter: ISearchScatter,
  search: ISearchView
): { data: unknown[]; layout: Record<string, unknown> } {
  const log = scatter.log && scatter.x.every(x => typeof x === 'number' && x > 0);
  const grid = themeColor('--jp-border-color2', '#e0e0e0');
  return {
    data: [
      {
        type: 'scatter',
        mode: 'markers',
        x: scatter.x,
        y: scatter.y,
        text: scatter.trial_ids.map(id => `trial ${id}`),
        hoverinfo: 'text+x+y',
        marker: {
          size: 9,
          color: scatter.y,
          colorscale: 'Viridis',
          reversescale: search.smaller_is_better
        }
      }
    ],
    layout: {
      height: 260,
      margin: { l: 56, r: 16, t: 8, b: 44 },
      xaxis: { title: { text: scatter.name }, type: log ? 'log' : '-', gridcolor: grid },
      yaxis: { title: { text: search.metric }, gridcolor: grid },
      showlegend: false
    }
  };
}

/** Each hyperparameter's share of the variance of the metric, as bars. */
function Importance(props: {
  importance: IHyperparameterImportance | null;
  error: string | null;
}): JSX.Element {
  const { importance, error } = props;
  if (error !== null) {
    return <p className="jp-DetHub-note">Hyperparameter importance is not available: {error}</p>;
  }
  if (importance === null) {
    return <p className="jp-DetHub-note">Working it out…</p>;
  }
  if (importance.importance.length === 0) {
    return (
      <p className="jp-DetHub-note">
        Importance needs trials whose {importance.metric} differs and whose hyperparameters differ.
      </p>
    );
  }
  return (
    <>
      <ol className="jp-DetHub-importance">
        {importance.importance.map(({ name, importance: share }) => (
          <li key={name} data-name={name}>
            <span className="jp-DetHub-importanceName">{name}</span>
            <span className="jp-DetHub-importanceBar" style={{ width: `${share * 100}%` }} />
            <span className="jp-DetHub-importanceShare">{(share * 100).toFixed(1)}%</span>
          </li>
        ))}
      </ol>
      <p className="jp-DetHub-note">
        Share of the variance of {importance.metric} each hyperparameter explains (fANOVA over{' '}
        {importance.trials} trials).
      </p>
    </>
  );
}

export function SearchSection(props: {
  search: ISearchView;
  importance: IHyperparameterImportance | null;
  importanceError: string | null;
}): JSX.Element {
  const { search } = props;
  const parallel = React.useMemo(
    () => ({
      data: [search.parallel],
      layout: { height: 340, margin: { l: 64, r: 64, t: 40, b: 16 } }
    }),
    [search]
  );
  const scatters = React.useMemo(
    () => search.scatters.map(s => ({ name: s.name, ...scatterFigure(s, search) })),
    [search]
  );
  return (
    <section className="jp-DetHub-section jp-DetHub-search">
      <h2>Search</h2>
      <p className="jp-DetHub-note">
        Each trial&apos;s hyperparameters against its best {search.metric} (
        {search.smaller_is_better ? 'lower' : 'higher'} is better).
      </p>
      <Plot
        className="jp-DetHub-parallel"
        name="parallel"
        data={parallel.data}
        layout={parallel.layout}
      />
      <div className="jp-DetHub-scatters">
        {scatters.map(s => (
          <Plot
            key={s.name}
            className="jp-DetHub-scatter"
            name={s.name}
            data={s.data}
            layout={s.layout}
          />
        ))}
      </div>
      <h3>Hyperparameter importance</h3>
      <Importance importance={props.importance} error={props.importanceError} />
    </section>
  );
}
