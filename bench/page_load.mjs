// The browser side of bench/page_load.py: Debian's Chromium, headless, driven by
// playwright-core (tests/e2e/browser's copy), loading one experiment's page again and again.
//
//   node bench/page_load.mjs SETUP_JSON
//
// SETUP_JSON names the hub (url, user, password), the experiment, how many loads of each kind
// to time and how many metric charts and search charts the page must draw. Signs in at the
// hub, then loads the page: `cold` loads in a fresh browser context (nothing cached, the
// sign-in cookie copied over), `warm` loads in the signed-in context (Plotly.js cached, as a
// user who opened it before has it). Each load is timed as `load` below says. Prints one JSON
// line: {"cold": [{painted, charts, search} in ms...], "warm": [...], "bytes": {url path:
// bytes on the wire of the first cold load}, "problems": [...]}.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(new URL("../tests/e2e/browser/package.json", import.meta.url));
const { chromium } = require("playwright-core");

const setup = JSON.parse(readFileSync(process.argv[2], "utf8"));
const problems = [];
const result = { cold: [], warm: [], bytes: {} };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium", headless: true,
});

async function newContext() {
  const context = await browser.newContext({ viewport: { width: 1300, height: 1000 } });
  // Nothing may come from anywhere but this machine.
  await context.route("**/*", (route) => {
    const url = new URL(route.request().url());
    if (url.hostname !== "127.0.0.1") {
      problems.push(`the page asked for ${url}`);
      return route.abort();
    }
    return route.continue();
  });
  return context;
}

// Milliseconds from the navigation's start until the page's HTML has come, and then until (a)
// its first contentful paint (its text and tables), (b) its metric charts drawn, and (c), its
// search view scrolled into sight right after (b), its parallel coordinates and hyperparameter
// charts drawn and the importance listed.
async function load(page) {
  const url = `${setup.hub}${setup.service}/experiments/${setup.experiment}`;
  await page.goto(url, { waitUntil: "commit" });
  const drawn = (selector) => Array.from(document.querySelectorAll(selector))
    .filter((gd) => gd.calcdata && gd.calcdata.length).length;
  await page.waitForFunction(`(${drawn})("#charts .js-plotly-plot") >= ${setup.charts}`,
    null, { timeout: 60000, polling: 5 });
  const charts = await page.evaluate(() => performance.now());
  const painted = await page.evaluate(() => performance.getEntriesByType("paint")
    .find((p) => p.name === "first-contentful-paint")?.startTime ?? null);
  const served = await page.evaluate(
    () => performance.getEntriesByType("navigation")[0]?.responseEnd ?? null);
  await page.locator("#search-parallel").scrollIntoViewIfNeeded();
  await page.waitForFunction(`(${drawn})("#search-parallel.js-plotly-plot") === 1
    && (${drawn})("#search-scatter .js-plotly-plot") >= ${setup.scatters}
    && document.querySelectorAll("#importance-list li").length > 0`,
  null, { timeout: 60000, polling: 5 });
  const search = await page.evaluate(() => performance.now());
  return { served, painted, charts, search };
}

try {
  const signedIn = await newContext();
  const page = await signedIn.newPage();
  page.on("pageerror", (e) => problems.push(`script error: ${e.message}`));
  await page.goto(`${setup.hub}/hub/login`);
  await page.fill("#username_input", setup.user);
  await page.fill("#password_input", setup.password);
  await Promise.all([page.waitForNavigation(), page.click("#login_submit")]);
  const cookies = await signedIn.cookies();

  for (let i = 0; i < setup.loads; i++) {
    const fresh = await newContext();
    await fresh.addCookies(cookies);
    const cold = await fresh.newPage();
    cold.on("pageerror", (e) => problems.push(`script error: ${e.message}`));
    if (i === 0) {
      cold.on("response", async (response) => {
        const sizes = await response.request().sizes().catch(() => null);
        if (sizes) {
          result.bytes[new URL(response.url()).pathname] =
            sizes.responseBodySize + sizes.responseHeadersSize;
        }
      });
    }
    result.cold.push(await load(cold));
    await fresh.close();
    result.warm.push(await load(page));
  }
} catch (e) {
  problems.push(e.message);
} finally {
  await browser.close();
}
console.log(JSON.stringify({ ...result, problems }));
