/**
 * Notebooks that draw det_hub's charts (`det_hub.widgets`: `MetricsPlot`, `CompareTrials`).
 * Once such a notebook is open, Plotly.js is loaded while its kernel starts, so that its first
 * chart draws at once rather than after Plotly.js has loaded (a second or more).
 */

/**
 * The name, on `window`, of the promise of Plotly.js that this panel and the notebook
 * widgets' charts (det_hub/widgets/plotly_chart.js) share: whichever asks first loads it.
 */
export const SHARED_PLOTLY = '__det_hub_plotly__';

const CHARTS = /\bdet_hub\.widgets\b|\b(?:MetricsPlot|CompareTrials)\b/;

/** Whether code cells with these sources draw det_hub's charts. */
export function drawsDetHubCharts(sources: Iterable<string>): boolean {
  for (const source of sources) {
    if (CHARTS.test(source)) {
      return true;
    }
  }
  return false;
}
