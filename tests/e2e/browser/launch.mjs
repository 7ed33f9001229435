// What the browser tests share: Debian's Chromium, headless, driven by playwright-core (never a
// downloaded browser), with a page that records script errors and refuses, and records, every
// request its test does not allow (nothing may come from a CDN or any other host).

import { writeFileSync } from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

export async function openPage({ viewport, allows, problems }) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
  });
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  page.on("pageerror", (e) => problems.push("script error: " + e.message));
  await context.route("**/*", (route) => {
    const url = route.request().url();
    if (!allows(new URL(url))) {
      problems.push("the page asked for " + url);
      return route.abort();
    }
    return route.continue();
  });
  return { browser, page };
}

// Runs `body(page)` in such a page and ends the process: exit code 0 when the body finished
// and nothing went wrong, 1 otherwise (what went wrong on stderr, and failure.png in outdir).
// The report is written to outdir/report.json, and `summary(report)` printed.
export async function runInPage({ viewport, allows, problems, report, outdir,
  summary = (r) => r }, body) {
  const { browser, page } = await openPage({ viewport, allows, problems });
  try {
    await body(page);
  } catch (e) {
    problems.push(e.message);
    await page.screenshot({ path: path.join(outdir, "failure.png"), fullPage: true })
      .catch(() => {});
  } finally {
    await browser.close();
  }
  writeFileSync(path.join(outdir, "report.json"), JSON.stringify(report, null, 2));
  console.log(JSON.stringify(summary(report)));
  if (problems.length) {
    console.error(problems.join("\n"));
    process.exit(1);
  }
}

// Signs in at the hub's login page of `origin` as `user`.
export async function signIn(page, origin, user, password) {
  await page.goto(origin + "/hub/login");
  await page.fill("#username_input", user);
  await page.fill("#password_input", password);
  await Promise.all([page.waitForNavigation(), page.click("#login_submit")]);
}
