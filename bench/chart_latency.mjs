// The browser side of bench/chart_latency.py: Debian's Chromium, headless, driven by
// playwright-core (tests/e2e/browser's copy), watching three charts of one experiment.
//
//   node bench/chart_latency.mjs SETUP_JSON
//
// SETUP_JSON names the hub (url, user, password), the JupyterLab server (url, token), the
// experiment, its notebook and how many training rows to wait for. Opens (a) the dashboard's
// experiment page, signed in at the hub, (b) the JupyterLab panel's view of the experiment
// and (c) the notebook, whose one cell makes a MetricsPlot of it; each in its own page. In
// each page a loop looks at the charts every 5 ms and notes, in wall-clock milliseconds, when
// each step first shows in a training trace's computed data (`gd.calcdata`, what Plotly
// draws). Prints "ready" once the three charts are there (the bench then lets the experiment
// run), and at the end one JSON line: {"seen": {surface: {step: ms}}, "problems": [...]}.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(new URL("../tests/e2e/browser/package.json", import.meta.url));
const { chromium } = require("playwright-core");

const setup = JSON.parse(readFileSync(process.argv[2], "utf8"));
const problems = [];
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// In the page: notes when each step first shows in the training traces of the Plotly charts
// under `selector`, as window.__detHubSeen = {step: wall-clock ms}.
function watch(selector) {
  const seen = {};
  window.__detHubSeen = seen;
  setInterval(() => {
    const now = performance.timeOrigin + performance.now();
    for (const gd of document.querySelectorAll(selector)) {
      const traces = gd._fullData || [];
      (gd.calcdata || []).forEach((points, i) => {
        const name = (traces[i] && traces[i].name) || "";
        if (!name.includes("training") || name.includes("(raw)")) return;
        for (const point of points) {
          if (typeof point.x === "number" && !(point.x in seen)) seen[point.x] = now;
        }
      });
    }
  }, 5);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium", headless: true,
});
const surfaces = {};
try {
  const open = async (name) => {
    const context = await browser.newContext({ viewport: { width: 1300, height: 1000 } });
    // Nothing may come from anywhere but this machine.
    await context.route("**/*", (route) => {
      const url = new URL(route.request().url());
      if (url.hostname !== "127.0.0.1") {
        problems.push(`${name} asked for ${url}`);
        return route.abort();
      }
      return route.continue();
    });
    const page = await context.newPage();
    page.on("pageerror", (e) => problems.push(`${name}: script error: ${e.message}`));
    surfaces[name] = page;
    return page;
  };
  const lab = new URL(setup.lab);
  const token = lab.searchParams.get("token");

  // (a) The dashboard's experiment page, signed in at the hub.
  const dashboard = await open("dashboard experiment page");
  await dashboard.goto(`${setup.hub}/hub/login`);
  await dashboard.fill("#username_input", setup.user);
  await dashboard.fill("#password_input", setup.password);
  await Promise.all([dashboard.waitForNavigation(), dashboard.click("#login_submit")]);
  await dashboard.goto(`${setup.hub}${setup.service}/experiments/${setup.experiment}`);
  await dashboard.waitForFunction(() => window.Plotly !== undefined, null, { timeout: 60000 });
  await dashboard.evaluate(watch, "div.chart[data-metric='loss'] .plot");

  // (b) The JupyterLab panel's view of the experiment.
  const panel = await open("lab panel experiment view");
  await panel.goto(`${lab.origin}/lab/workspaces/panel?token=${token}`);
  await panel.waitForFunction(() => window.jupyterapp !== undefined, null, { timeout: 60000 });
  await panel.waitForFunction(() => window.jupyterapp.commands.hasCommand(
    "det-hub:open-experiment"), null, { timeout: 60000 });
  await panel.evaluate((id) => window.jupyterapp.commands.execute(
    "det-hub:open-experiment", { id }), setup.experiment);
  await panel.waitForSelector(`.jp-DetHub-view[data-experiment-id="${setup.experiment}"]`,
    { timeout: 60000 });
  await panel.evaluate(watch,
    `.jp-DetHub-view[data-experiment-id="${setup.experiment}"] .jp-DetHub-chart`);

  // (c) The notebook's MetricsPlot, its cell run and its (empty) chart drawn.
  const notebook = await open("notebook MetricsPlot");
  await notebook.goto(`${lab.origin}/lab/workspaces/notebook/tree/`
    + `${encodeURIComponent(setup.notebook)}?token=${token}`);
  await notebook.waitForFunction((name) => {
    const current = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const kernel = current && current.sessionContext && current.sessionContext.session?.kernel;
    return current && current.context && current.context.path === name && current.context.isReady
      && kernel && kernel.status === "idle";
  }, setup.notebook, { timeout: 90000 });
  await notebook.evaluate(() => {
    void window.jupyterapp.commands.execute("notebook:run-all-cells");
  });
  await notebook.waitForSelector(".jp-OutputArea .js-plotly-plot", { timeout: 60000 });
  await notebook.evaluate(watch, ".jp-OutputArea .js-plotly-plot");

  for (const [name, page] of Object.entries(surfaces)) {
    const state = await page.evaluate(() => document.visibilityState);
    if (state !== "visible") problems.push(`${name} is ${state}: its timers would be slowed`);
  }
  console.log("ready");

  // Until every page has seen every row, or the time is up.
  const deadline = Date.now() + setup.timeout_s * 1000;
  const seen = {};
  for (;;) {
    for (const [name, page] of Object.entries(surfaces)) {
      seen[name] = await page.evaluate(() => window.__detHubSeen);
    }
    const done = Object.values(seen).every((s) => Object.keys(s).length >= setup.rows);
    if (done || Date.now() > deadline) break;
    await sleep(500);
  }
  console.log(JSON.stringify({ seen, problems }));
} catch (e) {
  problems.push(e.message);
  console.log(JSON.stringify({ seen: {}, problems }));
} finally {
  await browser.close();
}
