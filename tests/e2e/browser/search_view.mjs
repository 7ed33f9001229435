// An experiment's search on det_hub's page, in a real browser (Debian's Chromium, driven by
// playwright-core).
//
//   node search_view.mjs HUB_URL USER PASSWORD EXPERIMENT_ID OUTDIR
//
// Signs in at the hub as USER, opens the page of EXPERIMENT_ID (a finished search), waits for
// its parallel-coordinates chart and one hyperparameter-against-metric chart per varying
// hyperparameter, reads their axes, sorts the trials table by the searcher metric with a
// click on its heading (twice: up, then down) and reads the trial ids in each order. Every
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

  // Sorted by the metric's column, up then down.
  const heading = page.locator("#trials thead th").nth(4);
  const ids = () => page.evaluate(() => Array.from(
    document.querySelectorAll("#trials tbody tr"), (row) => Number(row.dataset.trial)));
  await heading.click();
  report.sorted_up = await ids();
  await heading.click();
  report.sorted_down = await ids();
});
