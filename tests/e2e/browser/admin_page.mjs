// det_hub's pages in a real browser: Debian's Chromium, driven by playwright-core.
//
//   node admin_page.mjs HUB_URL USER PASSWORD OUTDIR FINISHED_ID
//
// Signs in at the hub's login page as USER (a hub admin), opens det_hub's dashboard, waits
// for the experiment the pytest side creates meanwhile to come in on top, follows its link
// to the admin page, checks that the job queue shows a running experiment's job, waits for
// the agent the pytest side drains and then enables meanwhile to show as disabled and enabled
// again without a reload, has the updated row's Drain button ask (dismissed), then
// changes that job's priority through the page's form, opens the experiment's page and waits
// for its Plotly chart to draw a trace with points, then for its stream to add points to the
// chart and batches to the trials table, turns the log scale on and off, clicks its Kill button and dismisses the question
// it asks, reads each trial's colour on every chart of experiment FINISHED_ID, then opens a
// trial's logs there and waits for the follower's first answer. Screenshots go to OUTDIR.
// Every request must go to the hub (nothing from the internet), and no page may throw a
// script error.
// Exits 0 when all of that holds; prints what failed otherwise.

import { mkdirSync } from "node:fs";
import path from "node:path";
import { runInPage, signIn } from "./launch.mjs";

const [hubUrl, user, password, outdir, finishedId] = process.argv.slice(2);
if (!finishedId) {
  console.error("usage: node admin_page.mjs HUB_URL USER PASSWORD OUTDIR FINISHED_ID");
  process.exit(2);
}
mkdirSync(outdir, { recursive: true });
const origin = new URL(hubUrl).origin;
const service = origin + "/services/det-hub/";
const problems = [];
const report = {};

function check(ok, what) {
  if (!ok) throw new Error(what);
}

// Only the hub's own origin may be asked for anything.
await runInPage({
  viewport: { width: 1400, height: 1000 }, problems, report, outdir,
  allows: (url) => url.origin === origin,
}, async (page) => {
  await signIn(page, origin, user, password);

  // The dashboard, through the hub's OAuth sign-in to the service, links to the admin page.
  await page.goto(service);
  await page.locator("#experiments tbody tr").first().waitFor({ timeout: 15000 });
  report.experiments_listed = await page.locator("#experiments tbody tr").count();
  await page.screenshot({ path: path.join(outdir, "dashboard.png"), fullPage: true });
  // The pytest side creates an experiment once that screenshot exists: its row comes in on
  // top, without a reload.
  await page.waitForFunction((n) => document.querySelectorAll("#experiments tbody tr").length > n,
    report.experiments_listed, { timeout: 60000 });
  report.arrived = await page.evaluate(() => {
    const row = document.querySelector("#experiments tbody tr");
    return { id: Number(row.dataset.experiment), name: row.cells[1].textContent,
             state: row.cells[2].textContent };
  });
  await Promise.all([page.waitForNavigation(), page.click('header nav a:text-is("Admin")')]);
  check((await page.textContent("h1")).includes("Cluster administration"),
    "the admin page did not open: " + (await page.textContent("body")).slice(0, 500));
  const row = page.locator('#job-table tr[data-job^="exp-"]').filter({ hasText: "SCHEDULED" }).first();
  await row.waitFor({ timeout: 15000 });
  const job = await row.getAttribute("data-job");
  const experimentUrl = await row.locator("a").first().getAttribute("href");
  report.job = job;
  // Marks this load of the page: a reload would lose it.
  await page.evaluate(() => { window.detHubLoad = "first"; });
  await page.screenshot({ path: path.join(outdir, "admin.png"), fullPage: true });

  // The pytest side drains the agent through the REST API once that screenshot exists, and
  // enables it again once the next one does: the page follows the cluster's stream.
  const agentStatus = (word) => page.waitForFunction((w) => {
    const status = document.querySelector("#agent-table tr[data-agent] .agent-status");
    return status && status.textContent.trim() === w;
  }, word, { timeout: 30000 });
  await agentStatus("disabled");
  const agentRow = page.locator("#agent-table tr[data-agent]").first();
  report.agent_live = {
    agent: await agentRow.getAttribute("data-agent"),
    disabled: { load: await page.evaluate(() => window.detHubLoad),
                buttons: await agentRow.locator("button").allTextContents() },
  };
  await page.screenshot({ path: path.join(outdir, "admin-drained.png"), fullPage: true });
  await agentStatus("enabled");
  report.agent_live.enabled = { load: await page.evaluate(() => window.detHubLoad),
                                buttons: await agentRow.locator("button").allTextContents() };
  // The updated row's Drain asks first, naming the agent; dismissed, nothing is sent.
  const drainAsked = new Promise((resolve) => page.once("dialog", async (dialog) => {
    resolve(dialog.message());
    await dialog.dismiss();
  }));
  await agentRow.locator('button:text-is("Drain")').click();
  report.drain_question = await drainAsked;
  await page.waitForTimeout(500);
  check(await page.evaluate(() => window.detHubLoad) === "first",
    "dismissing the Drain question left or reloaded the page");

  // The priority form posts with the page's XSRF token, as a browser sends it.
  const jobRow = page.locator(`#job-table tr[data-job="${job}"]`);
  await jobRow.locator('input[name="priority"]').fill("7");
  await Promise.all([page.waitForNavigation(),
    jobRow.locator('input[name="priority"] + button').click()]);
  const priority = await page.locator(`#job-table tr[data-job="${job}"] input[name="priority"]`).inputValue();
  check(priority === "7", `the job's priority reads ${priority} after setting it to 7`);
  report.priority = Number(priority);

  // The experiment's page: a chart with points, which its stream extends as the trial
  // reports, and the trial's batches in its table going up.
  await page.goto(new URL(experimentUrl, origin).href);
  await page.waitForFunction(() => {
    const chart = document.querySelector("#charts .js-plotly-plot");
    return chart && chart.data && chart.data.some((t) => t.x && t.x.length > 0);
  }, null, { timeout: 30000 });
  report.traces = await page.evaluate(() => Array.from(
    document.querySelectorAll("#charts .js-plotly-plot"),
    (chart) => chart.data.map((t) => ({ name: t.name, points: t.x.length }))).flat());
  const points = () => Math.max(...Array.from(document.querySelectorAll("#charts .js-plotly-plot"),
    (chart) => Math.max(...chart.data.map((t) => t.x.length))));
  const drawnFirst = await page.evaluate(points);
  const stepsFirst = Number(await page.textContent("#trials td.steps"));
  await page.waitForFunction((n) => {
    const chart = Array.from(document.querySelectorAll("#charts .js-plotly-plot"));
    return chart.some((c) => c.data.some((t) => t.x.length > n));
  }, drawnFirst, { timeout: 20000 });
  await page.waitForFunction(
    (n) => Number(document.querySelector("#trials td.steps").textContent) > n, stepsFirst,
    { timeout: 20000 });
  report.live = { points: [drawnFirst, await page.evaluate(points)], steps: stepsFirst };
  await page.screenshot({ path: path.join(outdir, "experiment.png"), fullPage: true });
  // The log-scale switch redraws every chart.
  await page.check("#log-scale");
  await page.waitForFunction(() => Array.from(document.querySelectorAll("#charts .js-plotly-plot"))
    .every((chart) => chart.layout.yaxis.type === "log"), null, { timeout: 10000 });
  report.log_scale = true;
  await page.uncheck("#log-scale");

  // Kill asks first, naming the experiment and its owner; dismissed, nothing is sent.
  const here = page.url();
  const asked = new Promise((resolve) => page.once("dialog", async (dialog) => {
    resolve(dialog.message());
    await dialog.dismiss();
  }));
  await page.click('#actions button:text-is("Kill")');
  report.kill_question = await asked;
  await page.waitForTimeout(500);
  check(page.url() === here, "dismissing the Kill question left the page for " + page.url());

  // A finished experiment with a chart per metric: each trial's colour, chart by chart.
  await page.goto(service + "experiments/" + finishedId);
  await page.waitForFunction(() => document.querySelectorAll("#charts .js-plotly-plot").length > 1,
    null, { timeout: 30000 });
  report.colours = await page.evaluate(() => Array.from(
    document.querySelectorAll("#charts .js-plotly-plot"),
    (chart) => chart.data.filter((t) => t.showlegend !== false)
      .map((t) => ({ name: t.name, colour: t.line.color }))).flat());

  // A trial's logs, followed.
  const logs = page.locator("#trials a", { hasText: "Logs" }).first();
  await Promise.all([page.waitForNavigation(), logs.click()]);
  await page.waitForFunction(() => {
    const status = document.getElementById("log-status");
    return status && /Following|ended/.test(status.textContent);
  }, null, { timeout: 15000 });
  report.log_status = await page.textContent("#log-status");
  await page.screenshot({ path: path.join(outdir, "logs.png"), fullPage: true });
});
