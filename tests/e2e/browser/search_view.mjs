// An experiment's search on det_hub's page, in a real browser (Debian's Chromium, driven by
// playwright-core).
//
//   node search_view.mjs HUB_URL USER PASSWORD EXPERIMENT_ID OUTDIR
//
// Signs in at the hub as USER, opens the page of EXPERIMENT_ID (a finished search), waits for
// its parallel-coordinates chart and one hyperparameter-against-metric chart per varying
// hyperparameter, reads their axes, sorts the trials table by the searcher metric with a
// click on its heading (twice: up, then down) and reads the trial ids in each order; reads
// the hyperparameter importance; picks trials on the parallel coordinates and reads which the
// table lists; ticks a trial and reads which trials the charts draw; reads the rung table. Every
// request must go to the hub, and the page may throw no script error. The report
// (report.json in OUTDIR) is for the pytest side to compare with the master.

import { mkdirSync } from "node:fs";
import path from "node:path";
import { runInPage, signIn } from "./launch.mjs";

const [hubUrl, user, password, experimentId, outdir] = process.argv.slice(2);
if (!outdir) {
  console.error("usage: node search_view.mjs HUB_URL USER PASSWORD EXPERIMENT_ID OUTDIR");
  process.exit(2);
}
mkdirSync(outdir, { recursive: true });
const origin = new URL(hubUrl).origin;
const problems = [];
const report = {};

await runInPage({
  viewport: { width: 1400, height: 1200 }, problems, report, outdir,
  allows: (url) => url.origin === origin,
}, async (page) => {
  await signIn(page, origin, user, password);

  await page.goto(origin + "/services/det-hub/experiments/" + experimentId);
  // The search view is drawn once it is scrolled to.
  await page.locator("#search-parallel").scrollIntoViewIfNeeded();
  await page.waitForFunction(() => {
    const chart = document.getElementById("search-parallel");
    return chart && chart.data && chart.data.length === 1;
  }, null, { timeout: 30000 });
  report.parallel = await page.evaluate(() => {
    const trace = document.getElementById("search-parallel").data[0];
    return { type: trace.type, labels: trace.dimensions.map((d) => d.label),
             lines: trace.dimensions[0].values.length };
  });
  report.scatters = await page.evaluate(() => Array.from(
    document.querySelectorAll("#search-scatter .chart"), (chart) => {
      const plot = chart.querySelector(".js-plotly-plot");
      return { name: chart.querySelector("h3").textContent, xaxis: plot.layout.xaxis.type,
               points: plot.data[0].x.length };
    }));
  await page.screenshot({ path: path.join(outdir, "search.png"), fullPage: true });

  // A column per hyperparameter that varies.
  report.columns = await page.evaluate(() => Array.from(
    document.querySelectorAll("#trials thead th.hp"), (th) => th.textContent));

  // Sorted by the metric's column, up then down.
  const heading = page.locator("#trials thead th", { hasText: "validation_loss" });
  const ids = () => page.evaluate(() => Array.from(
    document.querySelectorAll("#trials tbody tr"), (row) => Number(row.dataset.trial)));
  await heading.click();
  report.sorted_up = await ids();
  await heading.click();
  report.sorted_down = await ids();

  // Importance, from the master's fANOVA.
  await page.waitForSelector("#importance-list li", { timeout: 60000 });
  report.importance = await page.evaluate(() => Array.from(
    document.querySelectorAll("#importance-list li"), (item) => ({
      name: item.querySelector(".name").textContent,
      percent: parseFloat(item.querySelector(".share").textContent) })));

  // Dragging x's axis to [0, 0.5] lists only the trials inside; "List every trial" undoes it.
  const shownIds = () => page.evaluate(() => Array.from(
    document.querySelectorAll("#trials tbody tr"))
    .filter((row) => !row.hidden).map((row) => Number(row.dataset.trial)).sort((a, b) => a - b));
  await page.evaluate(() => {
    const chart = document.getElementById("search-parallel");
    const k = chart.data[0].dimensions.findIndex((d) => d.label === "x");
    return window.Plotly.restyle(chart, { ["dimensions[" + k + "].constraintrange"]: [[0, 0.5]] });
  });
  report.picked = await shownIds();
  report.picked_note = await page.locator("#trial-picked").textContent();
  await page.screenshot({ path: path.join(outdir, "picked.png"), fullPage: true });
  await page.click("#trial-unpick");
  report.unpicked = await shownIds();

  // Ticking a trial draws only it on the charts.
  const first = report.sorted_up[0];
  await page.check('#trials tr[data-trial="' + first + '"] td.pick input');
  const drawnTrials = () => page.evaluate(() => Array.from(new Set(Array.from(
    document.querySelectorAll("#charts .js-plotly-plot"), (plot) => plot.data)
    .flat().map((trace) => Number(/trial (\d+)/.exec(trace.name)[1])))).sort((a, b) => a - b));
  await page.waitForFunction((id) => Array.from(
    document.querySelectorAll("#charts .js-plotly-plot"), (plot) => plot.data).flat()
    .every((trace) => trace.name.startsWith("trial " + id + " ")), first, { timeout: 10000 });
  report.ticked = await drawnTrials();
  await page.uncheck('#trials tr[data-trial="' + first + '"] td.pick input');
  await page.waitForFunction(() => new Set(Array.from(
    document.querySelectorAll("#charts .js-plotly-plot"), (plot) => plot.data).flat()
    .map((trace) => trace.name.split(" ")[1])).size > 1, null, { timeout: 10000 });
  report.unticked = await drawnTrials();

  // The rungs of the ASHA search.
  report.rungs = await page.evaluate(() => Array.from(
    document.querySelectorAll("#rung-table tbody tr"), (row) => ({
      rung: Number(row.cells[1].textContent), length: Number(row.cells[2].textContent),
      trials: row.cells[6].textContent ? row.cells[6].textContent.split(", ").map(Number) : [],
    })));
  // The checkpoints: each with the code that loads it and, for its owner, a form to register it.
  report.checkpoints = await page.evaluate(() => Array.from(
    document.querySelectorAll("#checkpoints tbody tr"), (row) => ({
      uuid: row.cells[0].textContent,
      code: row.querySelector("td.use details pre").textContent,
      register: row.querySelector("td.use form.register") !== null,
    })));
  await page.screenshot({ path: path.join(outdir, "trials.png"), fullPage: true });

  // The best trial's own page: its charts draw it alone, and its checkpoints are listed.
  await page.goto(origin + "/services/det-hub/trials/" + report.sorted_up[0]);
  await page.waitForFunction(() => document.querySelectorAll("#charts .js-plotly-plot").length > 0,
    null, { timeout: 30000 });
  report.trial_page = await page.evaluate(() => ({
    drawn: Array.from(new Set(Array.from(document.querySelectorAll("#charts .js-plotly-plot"),
      (plot) => plot.data).flat().map((trace) => Number(/trial (\d+)/.exec(trace.name)[1])))),
    checkpoints: Array.from(document.querySelectorAll("#checkpoints tbody tr"),
      (row) => row.cells[0].textContent),
  }));
  await page.screenshot({ path: path.join(outdir, "trial.png"), fullPage: true });
});
