// MetricsPlot in JupyterLab, in a real browser: Debian's Chromium, driven by playwright-core.
//
//   node metrics_plot.mjs LAB_URL NOTEBOOK EXPECTED OUTDIR
//
// LAB_URL is the server's address with its token (http://127.0.0.1:PORT/?token=T); the server
// runs with --LabApp.expose_app_in_browser=True. NOTEBOOK's code cells are: the widgets'
// import, a MetricsPlot of a finished experiment's loss, a MetricsPlot of its trials'
// validation_loss, and a CompareTrials of it. EXPECTED is a JSON file naming, per chart cell
// (by its index), the traces the chart must show as the master stores them ({name: steps}).
//
// Runs the import, then the first MetricsPlot cell, and times, in the page, how long after
// the cell was run its chart shows every stored point: at most 2 s. Runs the other cells and
// checks their charts. Saves the notebook, loads the page again (the notebook reopens, on the
// same kernel, whose widgets the page restores), checks that every chart is drawn again, and
// that no message of the page's console, over the 2 s a widget has to start and more, says
// "Failed to initialize model" or any other error of the widget framework.
// Screenshots go to OUTDIR (drawn.png, all.png, reopened.png), with report.json.
// Every request must stay on 127.0.0.1, and the page may throw no script error. Exits 0 when
// all of that holds; prints what failed otherwise.

import { mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { runInPage } from "./launch.mjs";

const [labUrl, notebookName, expectedPath, outdir] = process.argv.slice(2);
if (!outdir) {
  console.error("usage: node metrics_plot.mjs LAB_URL NOTEBOOK EXPECTED OUTDIR");
  process.exit(2);
}
mkdirSync(outdir, { recursive: true });
const lab = new URL(labUrl);
const token = lab.searchParams.get("token") || "";
// {cell index: {trace name: [steps]}}
const expected = JSON.parse(readFileSync(expectedPath, "utf8"));
const FIRST_CHART_MS = 2000;
const problems = [];
const report = { console: [] };

function check(ok, what) {
  if (!ok) throw new Error(what);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// In the page: the Plotly charts drawn in the output of code cell `index`, each as
// {name: steps} of its traces, once each trace's line is drawn.
function charts(index) {
  const panel = window.jupyterapp.shell.currentWidget;
  const cell = panel && panel.content.widgets[index];
  if (!cell) return null;
  return Array.from(cell.node.querySelectorAll(".jp-OutputArea .js-plotly-plot")).map((gd) => {
    const traces = Array.isArray(gd._fullData) ? gd._fullData : [];
    const drawn = gd.querySelectorAll(".scatterlayer .trace").length;
    if (drawn < traces.length) return {};
    return Object.fromEntries(traces.map((t) => [t.name, Array.from(t.x || [])]));
  });
}

// In the page: whether code cell `index` has run and returned.
function ran(index) {
  const cell = window.jupyterapp.shell.currentWidget.content.widgets[index];
  return cell.model.executionCount !== null
    && !(cell.node.querySelector(".jp-InputPrompt")?.textContent || "").includes("*");
}

// In the page: runs code cell `index` (the promise is not waited for) and notes when.
function run(index) {
  const panel = window.jupyterapp.shell.currentWidget;
  panel.content.activeCellIndex = index;
  window.__detHubRunAt = performance.now();
  void window.jupyterapp.commands.execute("notebook:run-cell");
}

// In the page: whether the first chart of cell `index` shows `want` ({name: steps}); notes
// when it first did.
function shows([index, want]) {
  const panel = window.jupyterapp.shell.currentWidget;
  const cell = panel.content.widgets[index];
  const gd = cell && cell.node.querySelector(".jp-OutputArea .js-plotly-plot");
  if (!gd || !Array.isArray(gd._fullData)) return false;
  const names = Object.keys(want);
  if (gd._fullData.length !== names.length
      || gd.querySelectorAll(".scatterlayer .trace").length < names.length) return false;
  for (const trace of gd._fullData) {
    const steps = want[trace.name];
    const x = trace.x || [];
    if (!steps || x.length !== steps.length || steps.some((s, i) => x[i] !== s)) return false;
  }
  window.__detHubShownAt = performance.now();
  return true;
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

async function openNotebook(page) {
  await page.waitForFunction(() => window.jupyterapp !== undefined, null, { timeout: 60000 });
  await page.waitForFunction((name) => {
    const panel = window.jupyterapp.shell.currentWidget;
    if (!panel || !panel.context || panel.context.path !== name) return false;
    const kernel = panel.sessionContext.session?.kernel;
    return panel.context.isReady && panel.content.widgets.length > 0 && kernel
      && kernel.status === "idle";
  }, notebookName, { timeout: 60000 });
}

await runInPage({
  viewport: { width: 1400, height: 1600 }, problems, report, outdir,
  allows: (url) => url.hostname === "127.0.0.1",
  summary: (r) => ({ ...r, console: r.console.filter((m) => m.type === "error") }),
}, async (page) => {
  page.on("console", (msg) => report.console.push({ type: msg.type(), text: msg.text() }));
  await page.goto(`${lab.origin}/lab/tree/${encodeURIComponent(notebookName)}?token=${token}`);
  await openNotebook(page);
  const codeCells = await page.evaluate(() => window.jupyterapp.shell.currentWidget.content
    .widgets.map((c, i) => [i, c.model.type]).filter(([, t]) => t === "code").map(([i]) => i));
  check(codeCells.length === 4, `${notebookName} has ${codeCells.length} code cells, not 4`);
  const [imports, plotCell, ...others] = codeCells;

  // The import first: what is timed is the plot's cell alone.
  await page.evaluate(run, imports);
  await page.waitForFunction(ran, imports, { timeout: 60000 });

  // The plot: every stored point within 2 s of the cell running.
  await page.evaluate(run, plotCell);
  try {
    await page.waitForFunction(shows, [plotCell, expected[plotCell]],
      { timeout: 30000, polling: 10 });
  } catch {
    const seen = await page.evaluate(charts, plotCell);
    throw new Error("the MetricsPlot cell's chart did not show the stored points within 30 s;"
      + ` it shows ${JSON.stringify(seen)}`);
  }
  report.first_chart_ms = await page.evaluate(
    () => window.__detHubShownAt - window.__detHubRunAt);
  report.plot_cell_ran = await page.evaluate(ran, plotCell);
  await page.screenshot({ path: path.join(outdir, "drawn.png") });
  check(report.first_chart_ms <= FIRST_CHART_MS,
    `the MetricsPlot cell's chart showed the stored points ${Math.round(report.first_chart_ms)}`
    + ` ms after the cell was run, more than ${FIRST_CHART_MS} ms`);
  await page.waitForFunction(ran, plotCell, { timeout: 30000 });

  // The other charts.
  for (const cell of others) {
    await page.evaluate(run, cell);
    await page.waitForFunction(ran, cell, { timeout: 60000 });
  }
  const chartCells = Object.keys(expected).map(Number);
  for (const cell of chartCells) {
    await page.waitForFunction(shows, [cell, expected[cell]], { timeout: 30000 })
      .catch(async () => {
        throw new Error(`cell ${cell}'s chart shows ${JSON.stringify(
          await page.evaluate(charts, cell))}, not ${JSON.stringify(expected[cell])}`);
      });
  }
  const compare = others[others.length - 1];
  await page.waitForFunction((i) => {
    const gds = window.jupyterapp.shell.currentWidget.content.widgets[i].node
      .querySelectorAll(".jp-OutputArea .js-plotly-plot");
    return gds.length === 2 && Array.from(gds).every((gd) => (gd._fullData || []).length === 1);
  }, compare, { timeout: 30000 }).catch(() => {
    throw new Error("the CompareTrials cell did not draw its two charts");
  });
  report.errors = await page.evaluate(() => window.jupyterapp.shell.currentWidget.content.widgets
    .flatMap((c) => (c.model.outputs ? c.model.outputs.toJSON() : []))
    .filter((o) => o.output_type === "error").map((o) => `${o.ename}: ${o.evalue}`));
  check(report.errors.length === 0, "cells failed: " + report.errors.join("; "));
  await page.screenshot({ path: path.join(outdir, "all.png"), fullPage: true });
  // The validation chart has one point per trial, all at the same step: its axes centre them.
  report.single_point = await page.evaluate((i) => {
    const gd = window.jupyterapp.shell.currentWidget.content.widgets[i].node
      .querySelector(".jp-OutputArea .js-plotly-plot");
    return { x: gd._fullLayout.xaxis.range, y: gd._fullLayout.yaxis.range,
             points: gd._fullData.map((t) => [t.x[0], t.y[0]]) };
  }, chartCells[1]);
  const before = {};
  for (const cell of chartCells) before[cell] = await page.evaluate(charts, cell);

  // Saved, then opened again: the page loads anew and restores the kernel's widgets.
  await page.evaluate(() => window.jupyterapp.commands.execute("docmanager:save"));
  report.console_before_reopen = report.console.length;
  await page.reload();
  await openNotebook(page);
  report.reopened_at = report.console.length;
  for (const cell of chartCells) {
    await page.waitForFunction(shows, [cell, expected[cell]], { timeout: 30000 })
      .catch(async () => {
        throw new Error(`after reopening, cell ${cell}'s chart shows ${JSON.stringify(
          await page.evaluate(charts, cell))}, not ${JSON.stringify(expected[cell])}`);
      });
    const now = await page.evaluate(charts, cell);
    check(same(now, before[cell]), `after reopening, cell ${cell} shows ${JSON.stringify(now)}`
      + ` where it showed ${JSON.stringify(before[cell])}`);
  }
  // A widget that fails to start says so 2 s after the page made its model: waited out.
  await sleep(4000);
  await page.screenshot({ path: path.join(outdir, "reopened.png"), fullPage: true });
  const widgetErrors = report.console.filter((m) => /Failed to initialize model|\[anywidget\]/
    .test(m.text) || (m.type === "error" && /widget|det_hub/i.test(m.text)));
  check(widgetErrors.length === 0, "the page's console says:\n"
    + widgetErrors.map((m) => `${m.type}: ${m.text}`).join("\n"));
});
