// The trials table of the det_hub panel's experiment view, and its comparison of experiments,
// in a real browser: Debian's Chromium, driven by playwright-core.
//
//   node labextension_trials.mjs LAB_URL SEARCH_ID OTHER_ID OUTDIR
//
// LAB_URL is the server's address with its token (http://127.0.0.1:PORT/?token=T); the server
// runs with --LabApp.expose_app_in_browser=True. SEARCH_ID is a finished search of several
// trials whose hyperparameters and searcher metric differ; OTHER_ID another finished
// experiment of the same user.
//
// Opens the panel, opens SEARCH_ID's view and reads the trials table's hyperparameter columns;
// sorts it by the searcher metric with a click on its heading (up, then down) and reads the
// trial ids in each order; filters it by state and by a trial's id; ticks the two best trials
// and reads what the chart draws (each curve's trial and colour) and each ticked row's colour;
// unticks them with "Draw every trial". Then ticks SEARCH_ID and OTHER_ID in the panel's list,
// compares them and reads the comparison's rows and chart. The report (report.json in OUTDIR)
// is for the pytest side to compare with the master. Screenshots go to OUTDIR. Every request
// must stay on 127.0.0.1, and the page may throw no script error.

import { mkdirSync } from "node:fs";
import path from "node:path";
import { runInPage } from "./launch.mjs";

const [labUrl, searchArg, otherArg, outdir] = process.argv.slice(2);
if (!outdir) {
  console.error("usage: node labextension_trials.mjs LAB_URL SEARCH_ID OTHER_ID OUTDIR");
  process.exit(2);
}
mkdirSync(outdir, { recursive: true });
const lab = new URL(labUrl);
const token = lab.searchParams.get("token") || "";
const search = Number(searchArg);
const other = Number(otherArg);
const problems = [];
const report = {};

// In the page: a view's chart, each curve's name and colour (as CSS computes it) and points.
function drawn(selector) {
  const view = document.querySelector(selector);
  const chart = view && view.querySelector(".jp-DetHub-chart.js-plotly-plot");
  if (!chart || !Array.isArray(chart._fullData)) return null;
  const css = (colour) => {
    const probe = document.createElement("span");
    probe.style.color = colour;
    document.body.appendChild(probe);
    const value = getComputedStyle(probe).color;
    probe.remove();
    return value;
  };
  return {
    trials: chart.dataset.trials,
    traces: chart._fullData.map((t) => ({
      name: t.name, colour: css(t.line.color), points: (t.x || []).length })),
  };
}

await runInPage({
  viewport: { width: 1500, height: 1100 }, problems, report, outdir,
  allows: (url) => url.hostname === "127.0.0.1",
}, async (page) => {
  await page.goto(`${lab.origin}/lab?token=${token}`);
  await page.waitForFunction(() => window.jupyterapp !== undefined, null, { timeout: 60000 });
  const icon = page.locator('.jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id="det-hub-sidebar"]');
  await icon.waitFor({ timeout: 30000 });
  await icon.click();
  const panel = page.locator("#det-hub-sidebar");
  const row = (id) => panel.locator(`.jp-DetHub-experiment[data-experiment-id="${id}"]`);
  await row(search).waitFor({ timeout: 30000 });
  await row(other).waitFor({ timeout: 30000 });

  // The search's view, once it has read everything (the experiment is over: no stream).
  await page.evaluate(async (id) => {
    await window.jupyterapp.commands.execute("det-hub:open-experiment", { id });
  }, search);
  const viewSelector = `.jp-DetHub-view[data-experiment-id="${search}"]`;
  const view = page.locator(viewSelector);
  // Each trial of the search reports one group (validation): a curve per row once all is read.
  await page.waitForFunction((s) => {
    const v = document.querySelector(s);
    if (!v) return false;
    const chart = v.querySelector(".jp-DetHub-chart.js-plotly-plot");
    const rows = v.querySelectorAll(".jp-DetHub-trialTable tbody tr").length;
    return v.dataset.state === "COMPLETED" && !v.textContent.includes("· live") && rows > 0
      && Array.isArray(chart && chart._fullData) && chart._fullData.length === rows;
  }, viewSelector, { timeout: 60000 });
  const table = view.locator(".jp-DetHub-trialTable");
  const ids = () => table.locator("tbody tr").evaluateAll(
    (rows) => rows.map((tr) => Number(tr.dataset.trialId)));
  report.columns = await table.locator("thead th.jp-DetHub-hparam").evaluateAll(
    (ths) => ths.map((th) => th.dataset.column));
  report.first_order = await ids();

  // Sorted by the searcher metric: lowest first, then highest first.
  const metricHeading = table.locator('thead th[data-column="metric"]');
  await metricHeading.locator("button").click();
  report.sorted_up = await ids();
  report.sort_up_mark = await metricHeading.getAttribute("aria-sort");
  await metricHeading.locator("button").click();
  report.sorted_down = await ids();
  report.sort_down_mark = await metricHeading.getAttribute("aria-sort");
  // Lowest first again, for the rest.
  await metricHeading.locator("button").click();

  // Filtered by state, then by a trial's id.
  report.state_options = await view.locator("select.jp-DetHub-trialState option").evaluateAll(
    (options) => options.map((o) => o.value));
  await view.locator("select.jp-DetHub-trialState").selectOption("COMPLETED");
  report.completed_rows = await ids();
  await view.locator("select.jp-DetHub-trialState").selectOption("");
  const best = report.sorted_up[0];
  await view.locator("input.jp-DetHub-trialQuery").fill(`#${best}`);
  report.query_rows = await ids();
  report.query_count = (await view.locator(".jp-DetHub-trialCount").textContent()).trim();
  await view.locator("input.jp-DetHub-trialQuery").fill("");
  report.all_rows = await ids();

  // The two best trials ticked: the chart draws them alone, each in its row's colour.
  report.drawn_before = await page.evaluate(drawn, viewSelector);
  const ticked = report.sorted_up.slice(0, 2);
  for (const id of ticked) {
    await table.locator(`tr[data-trial-id="${id}"] td.jp-DetHub-pick input`).check();
  }
  await page.waitForFunction(({ s, want }) => {
    const chart = document.querySelector(s + " .jp-DetHub-chart.js-plotly-plot");
    return chart && chart.dataset.trials === want && chart._fullData.length === 2;
  }, { s: viewSelector, want: [...ticked].sort((a, b) => a - b).join(" ") }, { timeout: 10000 });
  report.drawn_ticked = await page.evaluate(drawn, viewSelector);
  report.swatches = await table.locator("tbody tr").evaluateAll((rows) => Object.fromEntries(
    rows.map((tr) => [tr.dataset.trialId,
      getComputedStyle(tr.querySelector(".jp-DetHub-swatch")).backgroundColor])));
  report.ticked_note = (await view.locator(".jp-DetHub-trialCount").textContent()).trim();
  await view.locator(".jp-DetHub-trials-section").screenshot({
    path: path.join(outdir, "trials.png") });
  await view.locator(".jp-DetHub-chart").screenshot({
    path: path.join(outdir, "trials-chart.png") });

  // "Draw every trial" unticks them: every trial is drawn again.
  await view.locator("button.jp-DetHub-untick").click();
  await page.waitForFunction((s) => {
    const chart = document.querySelector(s + " .jp-DetHub-chart.js-plotly-plot");
    return chart && chart._fullData.length > 2;
  }, viewSelector, { timeout: 10000 });
  report.drawn_after = await page.evaluate(drawn, viewSelector);

  // The two experiments ticked in the panel's list and compared.
  await row(search).locator("input.jp-DetHub-compareTick").check();
  report.compare_enabled_with_one = await panel.locator("button.jp-DetHub-compare").isEnabled();
  await row(other).locator("input.jp-DetHub-compareTick").check();
  report.expanded_by_tick = await row(search).getAttribute("class");
  await panel.locator("button.jp-DetHub-compare").click();
  const pair = [search, other].sort((a, b) => a - b).join(" ");
  const compareSelector = `.jp-DetHub-view[data-compared="${pair}"][data-loaded="true"]`;
  await page.waitForFunction((s) => {
    const v = document.querySelector(s);
    return v && v.querySelector(".jp-DetHub-chart.js-plotly-plot");
  }, compareSelector, { timeout: 30000 });
  await page.waitForFunction((s) => {
    const chart = document.querySelector(s + " .jp-DetHub-chart.js-plotly-plot");
    return chart && Array.isArray(chart._fullData) && chart._fullData.length > 0;
  }, compareSelector, { timeout: 10000 });
  const comparison = page.locator(compareSelector);
  report.compare_error = await comparison.locator(".jp-DetHub-error").count();
  report.compared = await comparison.locator(".jp-DetHub-compareTable tbody tr").evaluateAll(
    (rows) => rows.map((tr) => ({
      experiment: Number(tr.dataset.experimentId), trial: Number(tr.dataset.trialId),
      colour: getComputedStyle(tr.querySelector(".jp-DetHub-swatch")).backgroundColor })));
  report.compare_columns = await comparison.locator(".jp-DetHub-compareTable thead th")
    .allTextContents();
  report.compare_drawn = await page.evaluate(drawn, compareSelector);
  report.compare_tab = await page.evaluate(() => window.jupyterapp.shell.currentWidget.title.label);
  await page.screenshot({ path: path.join(outdir, "compare.png") });
});
