// examples/quickstart.ipynb in JupyterLab, in a real browser: Debian's Chromium, driven by
// playwright-core.
//
//   node quickstart_notebook.mjs LAB_URL NOTEBOOK OUTDIR
//
// LAB_URL is the server's address with its token (http://127.0.0.1:PORT/?token=T); the server
// runs with --LabApp.expose_app_in_browser=True, so the page's `window.jupyterapp` runs
// JupyterLab's own commands. Opens NOTEBOOK, waits for its kernel, runs all cells, waits for
// the MetricsPlot cell's Plotly chart and counts its points every 500 ms while the watch cell
// waits for the search to end; once every cell has run, reads the chart's traces (steps per
// trace) and checks that no cell failed. Screenshots go to OUTDIR (notebook.png
// once the chart is drawn, finished.png at the notebook's end), with report.json for the
// pytest side.
// Every request must stay on 127.0.0.1, and the page may throw no script error.
// Exits 0 when all of that holds; prints what failed otherwise.

import { mkdirSync } from "node:fs";
import path from "node:path";
import { runInPage } from "./launch.mjs";

const [labUrl, notebookName, outdir] = process.argv.slice(2);
if (!outdir) {
  console.error("usage: node quickstart_notebook.mjs LAB_URL NOTEBOOK OUTDIR");
  process.exit(2);
}
mkdirSync(outdir, { recursive: true });
const lab = new URL(labUrl);
const token = lab.searchParams.get("token") || "";
const problems = [];
const report = { chart_samples: [] };

function check(ok, what) {
  if (!ok) throw new Error(what);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// In the page: the open notebook's code cell whose source contains `marker`, as its index,
// its output's text, and whether it ran (an execution count) or still runs ("*" prompt).
function cellState(marker) {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.widgets;
  const index = cells.findIndex((c) => c.model.type === "code"
    && c.model.sharedModel.getSource().includes(marker));
  if (index < 0) return null;
  const cell = cells[index];
  const outputs = cell.model.outputs ? cell.model.outputs.toJSON() : [];
  return {
    index,
    executionCount: cell.model.executionCount ?? null,
    running: (cell.node.querySelector(".jp-InputPrompt")?.textContent || "").includes("*"),
    text: cell.node.querySelector(".jp-OutputArea")?.textContent || "",
    errors: outputs.filter((o) => o.output_type === "error").map((o) => `${o.ename}: ${o.evalue}`),
  };
}

// In the page: the Plotly chart in the output of the code cell containing `marker`, each
// trace's name and steps.
function chartTraces(marker) {
  const panel = window.jupyterapp.shell.currentWidget;
  const cell = panel.content.widgets.find((c) => c.model.type === "code"
    && c.model.sharedModel.getSource().includes(marker));
  const chart = cell && cell.node.querySelector(".jp-OutputArea .js-plotly-plot");
  if (!chart || !Array.isArray(chart._fullData)) return null;
  return chart._fullData.map((t) => ({ name: t.name, x: Array.from(t.x || []) }));
}

// Only the JupyterLab server on 127.0.0.1 may be asked for anything.
await runInPage({
  viewport: { width: 1400, height: 1100 }, problems, report, outdir,
  allows: (url) => url.hostname === "127.0.0.1",
  summary: (r) => ({ ...r, traces: (r.traces || []).map(
    (t) => ({ name: t.name, points: t.x.length })) }),
}, async (page) => {
  const started = Date.now();
  const elapsed = () => (Date.now() - started) / 1000;
  await page.goto(`${lab.origin}/lab/tree/${encodeURIComponent(notebookName)}?token=${token}`);
  await page.waitForFunction(() => window.jupyterapp !== undefined, null, { timeout: 60000 });
  // The notebook is open, its cells are drawn and its kernel has started and is idle.
  await page.waitForFunction((name) => {
    const panel = window.jupyterapp.shell.currentWidget;
    if (!panel || !panel.context || panel.context.path !== name) return false;
    const kernel = panel.sessionContext.session?.kernel;
    return panel.context.isReady && panel.content.widgets.length > 0 && kernel
      && kernel.status === "idle";
  }, notebookName, { timeout: 60000 });
  report.kernel_idle_s = elapsed();

  // The command's promise settles only when every cell has run: it is not waited for here.
  await page.evaluate(() => {
    window.jupyterapp.commands.execute("notebook:run-all-cells");
  });

  // The chart. The cell is scrolled to, since JupyterLab may skip drawing cells off screen.
  const plot = "MetricsPlot(experiment.id";
  const plotCell = await page.evaluate(cellState, plot);
  check(plotCell, `no cell of ${notebookName} draws a MetricsPlot`);
  await page.evaluate((i) => window.jupyterapp.shell.currentWidget.content.scrollToItem(i, "start"),
    plotCell.index);
  try {
    await page.waitForFunction((marker) => {
      const panel = window.jupyterapp.shell.currentWidget;
      const cell = panel.content.widgets.find((c) => c.model.type === "code"
        && c.model.sharedModel.getSource().includes(marker));
      const chart = cell && cell.node.querySelector(".jp-OutputArea .js-plotly-plot");
      if (!chart || !Array.isArray(chart._fullData) || chart._fullData.length === 0) return false;
      cell.node.dataset.detHubChart = "";  // for the locator below
      return true;
    }, plot, { timeout: 45000 });
  } catch {
    const state = await page.evaluate(cellState, plot);
    throw new Error("the MetricsPlot cell drew no Plotly chart within 45 s (is the widget "
      + "frontend installed?); its output reads:\n" + (state ? state.text : "(no cell)")
      + (state && state.errors.length ? "\nerrors: " + state.errors.join("; ") : ""));
  }
  report.chart_drawn_s = elapsed();
  const points = (traces) => traces.reduce((n, t) => n + t.x.length, 0);
  // Running the cells below moves the notebook on: the chart is brought back into view.
  const chartCell = page.locator("[data-det-hub-chart]");
  await chartCell.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(outdir, "notebook.png") });
  // While the watch cell waits for the search to end, the chart's points are counted:
  // they must grow, as the trials report.
  const watch = "%det_experiment watch";
  const deadline = Date.now() + 120000;
  for (;;) {
    report.chart_samples.push(points(await page.evaluate(chartTraces, plot)));
    const state = await page.evaluate(cellState, watch);
    check(state, `no cell of ${notebookName} contains ${watch}`);
    if (state.executionCount !== null && !state.running) break;
    check(Date.now() < deadline, "the watch cell still runs after 120 s:\n" + state.text);
    await sleep(500);
  }
  report.search_done_s = elapsed();

  // Every cell has run, none failed, and the kernel is idle again.
  await page.waitForFunction(() => {
    const panel = window.jupyterapp.shell.currentWidget;
    return panel.sessionContext.session?.kernel?.status === "idle"
      && panel.content.widgets.every((c) => c.model.type !== "code"
        || (c.model.executionCount !== null
          && !(c.node.querySelector(".jp-InputPrompt")?.textContent || "").includes("*")));
  }, null, { timeout: 90000 });
  report.all_done_s = elapsed();
  report.errors = await page.evaluate(() => window.jupyterapp.shell.currentWidget.content.widgets
    .flatMap((c) => (c.model.outputs ? c.model.outputs.toJSON() : []))
    .filter((o) => o.output_type === "error").map((o) => `${o.ename}: ${o.evalue}`));
  check(report.errors.length === 0, "cells failed: " + report.errors.join("; "));
  report.traces = await page.evaluate(chartTraces, plot);
  const last = await page.evaluate(() => {
    const cells = window.jupyterapp.shell.currentWidget.content.widgets;
    return cells[cells.length - 1].node.querySelector(".jp-OutputArea")?.textContent || "";
  });
  report.last_output = last.trim();
  // The end of the notebook: the best model's prediction.
  await page.evaluate(() => {
    const content = window.jupyterapp.shell.currentWidget.content;
    return content.scrollToItem(content.widgets.length - 1, "end");
  });
  await sleep(500);
  await page.screenshot({ path: path.join(outdir, "finished.png") });
});
