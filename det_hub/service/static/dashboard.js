// det_hub's pages: an experiment's metric charts (Plotly.js), the follower of a trial's
// logs, and the question a destructive button asks before it posts. The charts and the logs
// read JSON endpoints beside the pages, signed in by the hub's cookie; the page's XSRF token
// goes with every request, as the hub's sign-in asks of scripts.
(function () {
  "use strict";

  const xsrf = document.querySelector('meta[name="xsrf-token"]').content;

  async function getJSON(url) {
    const answer = await fetch(url, {
      headers: { "X-XSRFToken": xsrf, Accept: "application/json" },
      credentials: "same-origin",
    });
    if (!answer.ok) {
      let why = answer.status + " " + answer.statusText;
      try { why = (await answer.json()).error || why; } catch (e) { /* not JSON */ }
      throw new Error(why);
    }
    return answer.json();
  }

  function sleep(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

  // Plotly reads a few tags and entities in its labels; names are data, so escape them.
  function label(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  // --- charts: one per metric, a trace per trial and group ---------------------------------
  function drawCharts(box, series) {
    if (!window.Plotly) return;
    const byMetric = new Map();
    for (const s of series) {
      if (!byMetric.has(s.metric)) byMetric.set(s.metric, []);
      byMetric.get(s.metric).push(s);
    }
    const empty = box.querySelector("#no-metrics");
    if (empty && byMetric.size) empty.remove();
    const existing = new Map();
    for (const div of box.querySelectorAll("div.chart")) existing.set(div.dataset.metric, div);
    for (const [metric, traces] of byMetric) {
      let div = existing.get(metric);
      if (!div) {
        div = document.createElement("div");
        div.className = "chart";
        div.dataset.metric = metric;
        box.appendChild(div);
      }
      const data = traces.map((s) => ({
        x: s.x, y: s.y, type: "scatter",
        mode: s.x.length > 1 ? "lines" : "markers",
        name: label("trial " + s.trial_id + " " + s.group),
        line: { dash: s.group === "validation" ? "solid" : "dot" },
      }));
      const layout = {
        title: { text: label(metric), font: { size: 14 } },
        xaxis: { title: { text: "batches" } },
        margin: { l: 55, r: 20, t: 40, b: 45 }, height: 320,
        legend: { orientation: "h", y: -0.25 },
      };
      window.Plotly.react(div, data, layout, { responsive: true, displaylogo: false });
    }
  }

  async function charts(box) {
    const source = document.getElementById("chart-data");
    drawCharts(box, JSON.parse(source.textContent));
    let live = box.dataset.live === "true";
    while (live) {
      await sleep(5000);
      try {
        const answer = await getJSON(box.dataset.url);
        drawCharts(box, answer.series);
        live = answer.live;
        const state = document.getElementById("state");
        if (state && state.textContent !== answer.state) {
          state.textContent = answer.state;
          state.className = "state state-" + answer.state.toLowerCase();
        }
      } catch (e) {
        // The master may be restarting; keep trying.
      }
    }
  }

  // --- logs: append new lines while the trial runs ------------------------------------------
  function logLine(line) {
    const row = document.createElement("span");
    row.className = "line " + line.stdtype;
    row.dataset.id = line.id;
    const ts = document.createElement("span");
    ts.className = "ts";
    ts.textContent = (line.timestamp || "").replace("T", " ").replace(/\.\d+/, "").replace("Z", "");
    row.appendChild(ts);
    if (line.rank !== null && line.rank !== undefined) {
      const rank = document.createElement("span");
      rank.className = "rank";
      rank.textContent = "[rank=" + line.rank + "]";
      row.appendChild(rank);
    }
    row.appendChild(document.createTextNode(" " + line.message.replace(/\n$/, "") + "\n"));
    return row;
  }

  async function followLogs(pre) {
    const follow = document.getElementById("follow");
    const status = document.getElementById("log-status");
    let after = Number(pre.dataset.after || 0);
    if (pre.dataset.ended === "true") return;
    if (follow.checked) window.scrollTo(0, document.body.scrollHeight);
    for (;;) {
      if (!follow.checked) {
        status.textContent = "Paused: check Follow to keep reading new lines.";
        await sleep(500);
        continue;
      }
      let answer;
      try {
        answer = await getJSON(pre.dataset.url + "?after_id=" + after);
      } catch (e) {
        status.textContent = "Could not read the logs (" + e.message + "); trying again.";
        await sleep(3000);
        continue;
      }
      status.textContent = "Following.";
      if (answer.logs.length) {
        const none = document.getElementById("no-logs");
        if (none) none.remove();
        const lines = document.createDocumentFragment();
        for (const line of answer.logs) lines.appendChild(logLine(line));
        pre.appendChild(lines);
        after = answer.logs[answer.logs.length - 1].id;
        window.scrollTo(0, document.body.scrollHeight);
      }
      if (answer.logs.length >= answer.batch) continue;
      if (answer.ended) {
        status.textContent = "The trial has ended.";
        follow.checked = false;
        follow.disabled = true;
        return;
      }
      await sleep(1000);
    }
  }

  // --- destructive actions ask first, naming what stops and whose it is -------------------
  document.addEventListener("submit", (event) => {
    const question = event.target.dataset ? event.target.dataset.confirm : undefined;
    if (question && !window.confirm(question)) event.preventDefault();
  });

  const box = document.getElementById("charts");
  if (box) charts(box);
  const pre = document.getElementById("logs");
  if (pre) followLogs(pre);
})();
