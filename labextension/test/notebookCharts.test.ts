import { drawsDetHubCharts } from '../src/model/notebookCharts';

describe('drawsDetHubCharts', () => {
  it("finds det_hub's chart widgets in a notebook's code", () => {
    expect(
      drawsDetHubCharts(['%load_ext det_hub', 'from det_hub.widgets import MetricsPlot'])
    ).toBe(true);
    expect(drawsDetHubCharts(['import det_hub.widgets as w'])).toBe(true);
    expect(drawsDetHubCharts(['compare = CompareTrials(3)'])).toBe(true);
  });

  it('leaves other notebooks alone', () => {
    expect(drawsDetHubCharts([])).toBe(false);
    expect(drawsDetHubCharts(['import det_hub', '%det_experiment list'])).toBe(false);
    expect(drawsDetHubCharts(['MyMetricsPlotter()', 'det_hub_widgets = 1'])).toBe(false);
  });
});
