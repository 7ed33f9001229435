// The det_hub panel of JupyterLab in a real browser: Debian's Chromium, driven by
// playwright-core.
//
//   node labextension.mjs LAB_URL RUNNING_ID ASHA_ID CONFIG_DIR CONFIG_FILE NOTEBOOK MODEL OUTDIR
//
// LAB_URL is the server's address with its token (http://127.0.0.1:PORT/?token=T); the server
// runs with --LabApp.expose_app_in_browser=True. RUNNING_ID is a long experiment already
// running on the master; ASHA_ID a short adaptive_asha experiment created paused;
// CONFIG_DIR/CONFIG_FILE is a short experiment's config in the server's root, beside its
// training script; NOTEBOOK is a notebook there; MODEL the name of a model to register a
// checkpoint under. DET_HUB_TEST_MASTER and DET_HUB_TEST_TOKEN (the master's URL and a token)
// let the script check what the master has, through its REST API.
//
// Opens the det_hub panel from its icon in the left area and checks that it lists RUNNING_ID
// as ACTIVE. Creates an experiment from CONFIG_FILE through the file browser's context menu
// and its dialog, sees it appear in the panel, opens its view in the main area, counts the
// points of its Plotly chart while it trains, and sees its state turn COMPLETED in the panel
// without a reload, while the list never asks for the experiments again: it follows the
// master's experiment stream. Activates ASHA_ID through the REST API. Downloads the checkpoint
// through the view's link, opens NOTEBOOK and inserts the code that loads the checkpoint from
// the view, then registers the checkpoint under MODEL through the view's dialog. Shows the
// cluster tab, where RUNNING_ID's job holds a slot and is in the queue. Opens RUNNING_ID's row,
// pauses it and activates it again through the confirmation dialogs (each state checked at the
// master), opens ASHA_ID's view and reads its rung table and search view once it is over, then kills
// RUNNING_ID through its dialog and sees it turn CANCELED. Collapses the panel and checks that
// it holds no stream and asks the master nothing while hidden, and follows the stream again
// once shown. The report (report.json in OUTDIR) has the created experiment's id and its
// chart's traces, for the pytest side to compare with the master. Screenshots go to OUTDIR.
// Every request must stay on 127.0.0.1, and the page may throw no script error. Exits 0 when
// all of that holds; prints what failed otherwise.

import { mkdirSync } from "node:fs";
import path from "node:path";
import { runInPage } from "./launch.mjs";

const [labUrl, runningArg, ashaArg, configDir, configFile, notebook, modelName, outdir] =
  process.argv.slice(2);
const master = process.env.DET_HUB_TEST_MASTER;
const masterToken = process.env.DET_HUB_TEST_TOKEN;
if (!outdir || !master || !masterToken) {
  console.error("usage: DET_HUB_TEST_MASTER=URL DET_HUB_TEST_TOKEN=T node labextension.mjs " +
    "LAB_URL RUNNING_ID ASHA_ID CONFIG_DIR CONFIG_FILE NOTEBOOK MODEL OUTDIR");
  process.exit(2);
}
mkdirSync(outdir, { recursive: true });
const lab = new URL(labUrl);
const token = lab.searchParams.get("token") || "";
const running = Number(runningArg);
const asha = Number(ashaArg);
const problems = [];
const report = {
  chart_samples: [], states_seen: {}, list_requests: [], stream_requests: [], rest_states: [],
};

function check(ok, what) {
  if (!ok) throw new Error(what);
}

// The master's REST API, straight from here (not through the page).
async function masterApi(method, path) {
  const r = await fetch(`${master}/api/v1${path}`, {
    method, headers: { Authorization: `Bearer ${masterToken}` },
  });
  check(r.ok, `${method} ${path}: ${r.status} ${await r.clone().text()}`);
  return r.json();
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// In the page: the main-area experiment view's chart, each trace's name and steps.
function viewChart(id) {
  const view = document.querySelector(`.jp-DetHub-view[data-experiment-id="${id}"]`);
  const chart = view && view.querySelector(".jp-DetHub-chart.js-plotly-plot");
  if (!chart || !Array.isArray(chart._fullData)) return null;
  return {
    metric: chart.dataset.metric,
    traces: chart._fullData.map((t) => ({ name: t.name, x: Array.from(t.x || []) })),
  };
}

await runInPage({
  viewport: { width: 1500, height: 1000 }, problems, report, outdir,
  allows: (url) => url.hostname === "127.0.0.1",
  summary: (r) => ({ ...r, traces: (r.traces || []).map((t) => ({ name: t.name, points: t.x.length })) }),
}, async (page) => {
  const started = Date.now();
  const elapsed = () => (Date.now() - started) / 1000;
  // Every look at the experiment list, and every connection to its stream, with when it was
  // made; the stream's connections still open.
  const openStreams = new Set();
  page.on("request", (request) => {
    const url = new URL(request.url());
    if (request.method() !== "GET") return;
    if (url.pathname.endsWith("/det-hub/api/v1/experiments")) {
      report.list_requests.push(elapsed());
    } else if (url.pathname.endsWith("/det-hub/api/v1/experiments/stream")) {
      report.stream_requests.push(elapsed());
      openStreams.add(request);
    }
  });
  page.on("requestfinished", (request) => openStreams.delete(request));
  page.on("requestfailed", (request) => openStreams.delete(request));

  await page.goto(`${lab.origin}/lab?token=${token}`);
  await page.waitForFunction(() => window.jupyterapp !== undefined, null, { timeout: 60000 });
  await page.waitForSelector(".jp-DirListing-item", { timeout: 60000 });

  // The panel, from its icon in the left area.
  const icon = page.locator('.jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id="det-hub-sidebar"]');
  await icon.waitFor({ timeout: 30000 });
  await icon.click();
  const panel = page.locator("#det-hub-sidebar");
  await panel.waitFor({ state: "visible", timeout: 10000 });
  const row = (id) => panel.locator(`.jp-DetHub-experiment[data-experiment-id="${id}"]`);
  await row(running).waitFor({ timeout: 30000 });
  report.running_state_first = await row(running).getAttribute("data-state");
  check(["QUEUED", "STARTING", "RUNNING"].includes(report.running_state_first),
    `experiment ${running} is listed as ${report.running_state_first}, not as active`);
  report.panel_listed_s = elapsed();
  await page.screenshot({ path: path.join(outdir, "sidebar.png") });

  // The file browser's context menu on the config: create an experiment.
  await page.locator('.jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id="filebrowser"]').click();
  const folder = page.locator(".jp-DirListing-item", { hasText: configDir }).first();
  await folder.dblclick();
  const config = page.locator('.jp-DirListing-item[data-file-type="yaml"]', { hasText: configFile });
  await config.waitFor({ timeout: 15000 });
  await config.click({ button: "right" });
  const item = page.locator(".lm-Menu-item", { hasText: "Create det_hub experiment" });
  await item.waitFor({ timeout: 10000 });
  await page.screenshot({ path: path.join(outdir, "context-menu.png") });
  await item.click();
  const dialog = page.locator(".jp-Dialog");
  await dialog.waitFor({ timeout: 10000 });
  report.launch_dialog = (await dialog.locator(".jp-Dialog-body").textContent()).trim();
  await dialog.locator("button.jp-mod-accept").click();
  const toast = page.locator(".Toastify__toast", { hasText: "created" });
  await toast.waitFor({ timeout: 60000 });
  const toastText = await toast.textContent();
  const match = /Experiment (\d+)/.exec(toastText);
  check(match, `the notification does not name the experiment: ${toastText}`);
  const created = Number(match[1]);
  report.created_id = created;
  report.created_s = elapsed();
  await page.screenshot({ path: path.join(outdir, "launched.png") });

  // Back to the panel: the new experiment is listed without a reload, running.
  await icon.click();
  await row(created).waitFor({ timeout: 30000 });
  report.states_seen[created] = [await row(created).getAttribute("data-state")];

  // Its view in the main area: the chart grows while it trains.
  await row(created).locator(".jp-DetHub-experimentSummary").click();
  await row(created).locator("button.jp-DetHub-open").click();
  const view = page.locator(`.jp-DetHub-view[data-experiment-id="${created}"]`);
  await view.waitFor({ timeout: 30000 });
  await page.waitForFunction(viewChart, created, { timeout: 60000 });
  report.chart_drawn_s = elapsed();
  const points = (chart) => chart.traces.reduce((n, t) => n + t.x.length, 0);
  let chart = await page.evaluate(viewChart, created);
  report.chart_samples.push(points(chart));
  let shot = false;
  // Sample the chart, and the panel's row, until the experiment is COMPLETED there.
  const deadline = Date.now() + 120000;
  for (;;) {
    const state = await row(created).getAttribute("data-state");
    const seen = report.states_seen[created];
    if (seen[seen.length - 1] !== state) seen.push(state);
    chart = await page.evaluate(viewChart, created);
    if (chart) report.chart_samples.push(points(chart));
    if (!shot && chart && points(chart) > 3) {
      await page.screenshot({ path: path.join(outdir, "experiment.png") });
      shot = true;
    }
    if (state === "COMPLETED") break;
    check(Date.now() < deadline, `experiment ${created} is still ${state} in the panel after 120 s`);
    await sleep(500);
  }
  report.completed_in_panel_s = elapsed();
  // The short ASHA search runs on the slot the launched experiment has left.
  await masterApi("POST", `/experiments/${asha}/activate`);
  // The stream ends with the experiment: wait for the last reports to be drawn.
  await page.waitForFunction((id) => {
    const v = document.querySelector(`.jp-DetHub-view[data-experiment-id="${id}"]`);
    return v && v.dataset.state === "COMPLETED" && !v.textContent.includes("· live");
  }, created, { timeout: 30000 });
  await sleep(500);
  chart = await page.evaluate(viewChart, created);
  report.metric = chart.metric;
  report.traces = chart.traces;
  report.checkpoints = await view.locator(".jp-DetHub-checkpointTable tbody tr").count();
  await page.screenshot({ path: path.join(outdir, "experiment-completed.png") });

  // The trial's log, from the view.
  await view.locator(".jp-DetHub-trialTable tbody tr button", { hasText: "Logs" }).first().click();
  await page.waitForFunction((id) => {
    const pre = document.querySelector(`.jp-DetHub-view[data-experiment-id="${id}"] .jp-DetHub-logs`);
    return pre && pre.textContent.includes("done");
  }, created, { timeout: 30000 });
  report.log_lines = (await view.locator(".jp-DetHub-logs").textContent()).split("\n");

  // The checkpoint's download link: a .tar.gz of its files, from the notebook server.
  const firstCheckpoint = view.locator(".jp-DetHub-checkpointTable tbody tr").first();
  report.checkpoint_uuid = await firstCheckpoint.getAttribute("data-uuid");
  const href = await firstCheckpoint.locator("a.jp-DetHub-download").getAttribute("href");
  report.download = await page.evaluate(async (url) => {
    const r = await fetch(url, { credentials: "same-origin" });
    const bytes = new Uint8Array(await r.arrayBuffer());
    let binary = "";
    bytes.forEach((b) => { binary += String.fromCharCode(b); });
    return { status: r.status, type: r.headers.get("content-type"), base64: btoa(binary) };
  }, href);

  // "Insert code to load" puts det_hub.load_checkpoint(...) in the notebook.
  await page.evaluate(async (p) => {
    await window.jupyterapp.commands.execute("docmanager:open", { path: p });
  }, notebook);
  await page.waitForFunction((p) => {
    const w = window.jupyterapp.shell.currentWidget;
    return w && w.context && w.context.path === p && w.context.isReady
      && w.content.widgets.length > 0;
  }, notebook, { timeout: 60000 });
  await page.evaluate((id) => window.jupyterapp.shell.activateById(`det-hub-experiment-${id}`),
    created);
  await firstCheckpoint.locator("button.jp-DetHub-insertCode").click();
  await page.waitForFunction((p) => {
    const w = window.jupyterapp.shell.currentWidget;
    return w && w.context && w.context.path === p && w.content.widgets.some(
      (c) => c.model.sharedModel.getSource().includes("load_checkpoint"));
  }, notebook, { timeout: 15000 });
  report.notebook_cells = await page.evaluate(() => window.jupyterapp.shell.currentWidget
    .content.widgets.map((c) => ({ type: c.model.type, source: c.model.sharedModel.getSource() })));
  await page.screenshot({ path: path.join(outdir, "inserted-code.png") });

  // "Register" puts the checkpoint in the model registry, under a model named in its dialog.
  await page.evaluate((id) => window.jupyterapp.shell.activateById(`det-hub-experiment-${id}`),
    created);
  await firstCheckpoint.locator("button.jp-DetHub-register").click();
  await dialog.waitFor({ timeout: 10000 });
  const modelInput = dialog.locator("input.jp-DetHub-modelName");
  await modelInput.waitFor({ timeout: 10000 });
  report.register_suggested = await modelInput.inputValue();
  await modelInput.fill(modelName);
  report.register_hint = (await dialog.locator(".jp-DetHub-registerHint").textContent()).trim();
  await page.screenshot({ path: path.join(outdir, "register-dialog.png") });
  await dialog.locator("button.jp-mod-accept").click();
  const registered = firstCheckpoint.locator(`.jp-DetHub-registered[data-model="${modelName}"]`);
  await registered.waitFor({ timeout: 15000 });
  report.registered_version = Number(await registered.getAttribute("data-version"));
  report.registered_text = (await registered.textContent()).trim();
  await page.screenshot({ path: path.join(outdir, "registered.png") });

  // The cluster tab: the running experiment's job holds a slot and is in the queue.
  await panel.locator('.jp-DetHub-tab[data-tab="cluster"]').click();
  const slot = panel.locator(".jp-DetHub-slot.jp-mod-used", { hasText: `exp-${running}` });
  await slot.first().waitFor({ timeout: 20000 });
  report.slot_text = (await slot.first().textContent()).trim();
  report.queued_job = (await panel.locator(`.jp-DetHub-jobs tr[data-job-id="exp-${running}"]`)
    .textContent({ timeout: 10000 })).trim();
  await page.screenshot({ path: path.join(outdir, "cluster.png") });
  await panel.locator('.jp-DetHub-tab[data-tab="experiments"]').click();

  // Pause the running experiment through its row's button and the confirmation dialog, then
  // activate it again; the list shows each state, and the master has it.
  await row(running).locator(".jp-DetHub-experimentSummary").click();
  report.states_seen[running] = [report.running_state_first];
  const act = async (action, expected) => {
    const button = row(running).locator(`button[data-action="${action}"]`);
    await button.waitFor({ timeout: 10000 });
    await button.click();
    await dialog.waitFor({ timeout: 10000 });
    report[`${action}_dialog`] = (await dialog.locator(".jp-Dialog-header").textContent()).trim();
    if (action === "pause") await page.screenshot({ path: path.join(outdir, "pause-dialog.png") });
    await dialog.locator("button.jp-mod-accept").click();
    await dialog.waitFor({ state: "detached", timeout: 10000 });
    const until = Date.now() + 30000;
    for (;;) {
      const state = await row(running).getAttribute("data-state");
      const seen = report.states_seen[running];
      if (seen[seen.length - 1] !== state) seen.push(state);
      if (state === expected) break;
      check(Date.now() < until, `experiment ${running} is still ${state} 30 s after ${action}`);
      await sleep(250);
    }
    const { experiment } = await masterApi("GET", `/experiments/${running}`);
    report.rest_states.push([action, experiment.state]);
    check(experiment.state === expected,
      `the master has experiment ${running} ${experiment.state} after ${action}, not ${expected}`);
  };
  await act("pause", "PAUSED");
  await page.screenshot({ path: path.join(outdir, "paused.png") });
  await act("activate", "RUNNING");

  // The ASHA search's view: its rung table, once the search is over.
  await page.evaluate(async (id) => {
    await window.jupyterapp.commands.execute("det-hub:open-experiment", { id });
  }, asha);
  const ashaView = page.locator(`.jp-DetHub-view[data-experiment-id="${asha}"]`);
  await ashaView.waitFor({ timeout: 30000 });
  await page.waitForFunction((id) => {
    const v = document.querySelector(`.jp-DetHub-view[data-experiment-id="${id}"]`);
    return v && v.dataset.state === "COMPLETED" && !v.textContent.includes("· live");
  }, asha, { timeout: 120000 });
  await ashaView.locator(".jp-DetHub-rungTable").waitFor({ timeout: 10000 });
  await sleep(500);
  report.rungs = await ashaView.locator(".jp-DetHub-rungTable tbody tr").evaluateAll(
    (rows) => rows.map((tr) => ({
      bracket: Number(tr.dataset.bracket), rung: Number(tr.dataset.rung),
      cells: Array.from(tr.cells).map((td) => td.textContent.trim()),
    })));
  report.rung_headers = await ashaView.locator(".jp-DetHub-rungTable thead th")
    .allTextContents();
  report.asha_done_s = elapsed();
  await page.screenshot({ path: path.join(outdir, "rungs.png") });
  // Its search view: parallel coordinates, a chart per hyperparameter, and importance.
  const search = ashaView.locator(".jp-DetHub-search");
  await search.locator(".jp-DetHub-parallel.js-plotly-plot").waitFor({ timeout: 30000 });
  // Importance: a bar per hyperparameter, or why there is none.
  await search.locator(".jp-DetHub-importance li, .jp-DetHub-note:has-text('Importance')")
    .first().waitFor({ timeout: 60000 });
  report.search = await search.evaluate((section) => ({
    lines: section.querySelector(".jp-DetHub-parallel").data[0].customdata.length,
    scatters: Array.from(section.querySelectorAll(".jp-DetHub-scatter"),
      (div) => div.dataset.name),
    importance: Array.from(section.querySelectorAll(".jp-DetHub-importance li"),
      (li) => li.dataset.name),
    note: section.lastElementChild.textContent,
  }));
  await search.screenshot({ path: path.join(outdir, "search.png") });

  // Kill the running experiment through its row's button and the confirmation dialog.
  const kill = row(running).locator('button[data-action="kill"]');
  await kill.waitFor({ timeout: 10000 });
  await kill.click();
  await dialog.waitFor({ timeout: 10000 });
  report.kill_dialog = (await dialog.locator(".jp-Dialog-header").textContent()).trim();
  await page.screenshot({ path: path.join(outdir, "kill-dialog.png") });
  await dialog.locator("button.jp-mod-accept").click();
  const killDeadline = Date.now() + 60000;
  for (;;) {
    const state = await row(running).getAttribute("data-state");
    const seen = report.states_seen[running];
    if (seen[seen.length - 1] !== state) seen.push(state);
    if (state === "CANCELED") break;
    check(Date.now() < killDeadline, `experiment ${running} is still ${state} 60 s after the kill`);
    await sleep(250);
  }
  await page.screenshot({ path: path.join(outdir, "killed.png") });

  // The palette's command takes the config open in the editor (cancelled here).
  await page.evaluate(async (p) => {
    await window.jupyterapp.commands.execute("docmanager:open", { path: p });
  }, `${configDir}/${configFile}`);
  await page.waitForFunction((p) => {
    const w = window.jupyterapp.shell.currentWidget;
    return w && w.context && w.context.path === p && w.context.isReady;
  }, `${configDir}/${configFile}`, { timeout: 30000 });
  report.palette_enabled = await page.evaluate(() => window.jupyterapp.commands.isEnabled(
    "det-hub:create-experiment-from-current-file"));
  await page.evaluate(() => {
    void window.jupyterapp.commands.execute("det-hub:create-experiment-from-current-file");
  });
  await dialog.waitFor({ timeout: 10000 });
  report.palette_dialog = (await dialog.locator(".jp-Dialog-body").textContent()).trim();
  await dialog.locator("button.jp-mod-reject").click();
  await dialog.waitFor({ state: "detached", timeout: 10000 });

  // Collapsed, the panel holds no stream and asks nothing; shown again, it follows the stream
  // at once.
  await icon.click();
  await panel.waitFor({ state: "hidden", timeout: 10000 });
  await sleep(500);
  report.streams_open_when_hidden = openStreams.size;
  const hiddenFrom = report.list_requests.length + report.stream_requests.length;
  await sleep(5000);
  report.requests_while_hidden =
    report.list_requests.length + report.stream_requests.length - hiddenFrom;
  const shownAt = elapsed();
  await icon.click();
  await panel.waitFor({ state: "visible", timeout: 10000 });
  const askedAgain = Date.now() + 5000;
  while (!report.stream_requests.some((t) => t >= shownAt)) {
    check(Date.now() < askedAgain, "the panel, shown again, did not follow the experiments");
    await sleep(100);
  }
  report.streams_open_when_shown = openStreams.size;
  report.total_s = elapsed();
});
