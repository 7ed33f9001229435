/**
 * A Plotly chart of one metric's curves. Plotly.js (the `plotly.js-dist-min` bundle) is
 * loaded the first time a chart is drawn, or once a notebook that draws det_hub's charts is
 * open, so the sidebar alone never pays for it.
 */

import { ReactWidget } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { SHARED_PLOTLY } from '../model/notebookCharts';
import { ITrace } from '../model/series';

type PlotlyModule = typeof import('plotly.js-dist-min');

let plotly: Promise<PlotlyModule> | null = null;

/** Plotly.js, loaded once, and shared with the notebook widgets' charts. */
export function loadPlotly(): Promise<PlotlyModule> {
  if (!plotly) {
    const shared = window as unknown as Record<string, Promise<PlotlyModule> | null | undefined>;
    plotly =
      shared[SHARED_PLOTLY] ??
      import('plotly.js-dist-min').then(
        module =>
          ((module as unknown as { default?: PlotlyModule }).default ?? module) as PlotlyModule
      );
    shared[SHARED_PLOTLY] = plotly;
  }
  return plotly;
}

/** A CSS variable of JupyterLab's theme, for Plotly's colours (which are not CSS). */
export function themeColor(name: string, fallback: string): string {
  const value = getComputedStyle(document.body).getPropertyValue(name).trim();
  return value || fallback;
}

/**
 * Draws into the element `node` holds with `draw` once Plotly.js is loaded, again whenever
 * `deps` change, and frees the chart when the component goes.
 */
export function usePlot(
  node: React.RefObject<HTMLDivElement>,
  draw: (Plotly: PlotlyModule, div: HTMLDivElement) => void,
  deps: React.DependencyList
): void {
  React.useEffect(() => {
    let cancelled = false;
    void loadPlotly().then(Plotly => {
      const div = node.current;
      if (!cancelled && div) {
        draw(Plotly, div);
      }
    });
    return () => {
      cancelled = true;
    };
  }, deps);

  React.useEffect(() => {
    const div = node.current;
    return () => {
      if (div && plotly) {
        void plotly.then(Plotly => Plotly.purge(div));
      }
    };
  }, []);
}

export function MetricChart(props: {
  metric: string | null;
  traces: ITrace[];
  /** What the chart says when it has no curve. */
  empty?: string;
}): JSX.Element {
  const node = React.useRef<HTMLDivElement>(null);
  const { metric, traces } = props;
  const points = traces.reduce((n, t) => n + t.x.length, 0);
  const trials = [...new Set(traces.map(t => t.trialId))].join(' ');

  usePlot(
    node,
    (Plotly, div) => {
      const font = themeColor('--jp-ui-font-color1', '#222');
      const grid = themeColor('--jp-border-color2', '#e0e0e0');
      const data = traces.map(trace => ({
        type: 'scatter' as const,
        name: trace.name,
        x: trace.x,
        y: trace.y,
        mode:
          trace.group === 'training' && trace.x.length > 1
            ? ('lines' as const)
            : ('lines+markers' as const),
        line: {
          dash: trace.group === 'training' ? ('solid' as const) : ('dot' as const),
          color: trace.colour
        },
        marker: { color: trace.colour }
      }));
      void Plotly.react(
        div,
        data,
        {
          autosize: true,
          height: 320,
          margin: { l: 56, r: 16, t: 16, b: 44 },
          paper_bgcolor: 'rgba(0,0,0,0)',
          plot_bgcolor: 'rgba(0,0,0,0)',
          font: { color: font, size: 11 },
          xaxis: { title: { text: 'batches' }, gridcolor: grid, zeroline: false },
          yaxis: { title: { text: metric ?? '' }, gridcolor: grid, zeroline: false },
          legend: { orientation: 'h', y: -0.2 },
          showlegend: true
        },
        { responsive: true, displaylogo: false }
      );
    },
    [metric, traces]
  );

  return (
    <div
      className="jp-DetHub-chart"
      ref={node}
      data-metric={metric ?? ''}
      data-points={points}
      data-trials={trials}
    >
      {traces.length === 0 ? (
        <p className="jp-DetHub-note">{props.empty ?? 'No reports of this metric yet.'}</p>
      ) : null}
    </div>
  );
}

/** Fits the charts inside `host` to their boxes again (after the host was resized). */
export function resizeCharts(host: HTMLElement): void {
  if (!plotly) {
    return;
  }
  void plotly.then(Plotly => {
    host.querySelectorAll<HTMLElement>('.js-plotly-plot').forEach(div => {
      void Plotly.Plots.resize(div);
    });
  });
}

/** A "Metrics" heading with a menu of the metric names, over the chart of the chosen one. */
export function MetricSection(props: {
  metric: string | null;
  names: string[];
  onPick: (name: string) => void;
  traces: ITrace[];
  empty?: string;
}): JSX.Element {
  return (
    <>
      <h2>
        Metrics{' '}
        <select
          className="jp-DetHub-metricSelect"
          aria-label="Metric"
          value={props.metric ?? ''}
          onChange={event => props.onPick(event.target.value)}
        >
          {props.names.map(name => (
            <option key={name} value={name}>
              {name}
            </option>
          ))}
        </select>
      </h2>
      <MetricChart metric={props.metric} traces={props.traces} empty={props.empty} />
    </>
  );
}

/**
 * A main-area view with charts: it starts loading what it shows when first attached, and its
 * charts follow its size.
 */
export abstract class ChartView extends ReactWidget {
  /** Start loading what the view shows (once, when it is first attached). */
  protected abstract start(): void;

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    if (!this._started) {
      this._started = true;
      this.start();
    }
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    resizeCharts(this.node);
  }

  private _started = false;
}
