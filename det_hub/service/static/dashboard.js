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
  // A trial keeps its colour on every chart of the page: the order trials first appear in.
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#8c6d31", "#843c39",
    "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1"];
  const trialColours = new Map();
  function colourOf(trialId) {
    if (!trialColours.has(trialId)) {
      const n = trialColours.size;
      // Past the palette, hues a golden angle apart never repeat.
      trialColours.set(trialId, n < PALETTE.length ? PALETTE[n]
        : "hsl(" + Math.round((n * 137.508) % 360) + ", 62%, 45%)");
    }
    return trialColours.get(trialId);
  }

  // The chart settings, kept in the browser between pages.
  const settings = {
    log: false, smoothing: 0, counters: false,
    load() {
      try { Object.assign(this, JSON.parse(localStorage.getItem("det_hub.charts") || "{}")); }
      catch (e) { /* none kept */ }
    },
    save() {
      try {
        localStorage.setItem("det_hub.charts", JSON.stringify(
          { log: this.log, smoothing: this.smoothing, counters: this.counters }));
      } catch (e) { /* storage refused: the settings last for this page */ }
    },
  };

  // Exponential moving average, debiased at the start (TensorBoard's smoothing).
  function smooth(ys, weight) {
    let last = 0;
    return ys.map((y, i) => {
      last = last * weight + (1 - weight) * y;
      return last / (1 - Math.pow(weight, i + 1));
    });
  }

  // An axis range around values that are all the same (one point): the value in the middle.
  function around(values) {
    if (!values.length || values.some((v) => v !== values[0])) return undefined;
    const pad = Math.abs(values[0]) * 0.1 || 1;
    return [values[0] - pad, values[0] + pad];
  }

  function traceData(s) {
    const colour = colourOf(s.trial_id);
    const name = label("trial " + s.trial_id + " " + s.group);
    const mode = s.x.length > 1 ? "lines" : "markers";
    const dash = s.group === "validation" ? "solid" : "dot";
    const main = { x: s.x, y: s.y, type: "scatter", mode, name, legendgroup: name,
      line: { color: colour, dash }, marker: { color: colour } };
    if (!settings.smoothing || s.x.length < 3) return [main];
    return [
      { ...main, name: name + " (raw)", showlegend: false, hoverinfo: "skip", opacity: 0.25 },
      { ...main, y: smooth(s.y, settings.smoothing) },
    ];
  }

  function drawCharts(box, series) {
    if (!window.Plotly) return;
    const byMetric = new Map();
    for (const s of series) {
      colourOf(s.trial_id);
      if (s.counter && !settings.counters) continue;
      if (!byMetric.has(s.metric)) byMetric.set(s.metric, []);
      byMetric.get(s.metric).push(s);
    }
    const empty = box.querySelector("#no-metrics");
    if (empty && byMetric.size) empty.remove();
    const existing = new Map();
    for (const div of box.querySelectorAll("div.chart")) existing.set(div.dataset.metric, div);
    for (const [metric, div] of existing) {
      if (!byMetric.has(metric)) { window.Plotly.purge(div.querySelector(".plot")); div.remove(); }
    }
    for (const [metric, traces] of byMetric) {
      let div = existing.get(metric);
      if (!div) {
        div = document.createElement("div");
        div.className = "chart";
        div.dataset.metric = metric;
        const title = document.createElement("h3");
        title.textContent = metric;
        const plot = document.createElement("div");
        plot.className = "plot";
        div.append(title, plot);
        box.appendChild(div);
      }
      const xs = traces.flatMap((s) => s.x);
      const ys = traces.flatMap((s) => s.y);
      const log = settings.log && ys.every((y) => y > 0);
      const xRange = around(xs);
      const yRange = log ? undefined : around(ys);
      const layout = {
        xaxis: { title: { text: "batches", standoff: 4 }, range: xRange, autorange: !xRange },
        yaxis: { type: log ? "log" : "linear", range: yRange, autorange: !yRange },
        margin: { l: 60, r: 20, t: 10, b: 40 }, height: 300,
        legend: { orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom" },
        showlegend: true,
      };
      window.Plotly.react(div.querySelector(".plot"), traces.flatMap(traceData), layout,
        { responsive: true, displaylogo: false });
    }
  }

  function chartControls(box, redraw) {
    settings.load();
    const log = document.getElementById("log-scale");
    const smoothing = document.getElementById("smoothing");
    const shown = document.getElementById("smoothing-value");
    const counters = document.getElementById("show-counters");
    if (!log || !smoothing || !counters) return;
    log.checked = settings.log;
    smoothing.value = String(settings.smoothing);
    shown.textContent = String(settings.smoothing);
    counters.checked = settings.counters;
    const changed = () => {
      settings.log = log.checked;
      settings.smoothing = Number(smoothing.value);
      settings.counters = counters.checked;
      shown.textContent = String(settings.smoothing);
      settings.save();
      redraw();
    };
    for (const input of [log, smoothing, counters]) input.addEventListener("input", changed);
  }

  // --- live: the experiment's stream keeps its charts, state, progress and trials current ---
  function appendRow(series, counters, row) {
    for (const [metric, value] of Object.entries(row.metrics)) {
      if (typeof value !== "number" || !Number.isFinite(value)) continue;
      let s = series.find((t) => t.metric === metric && t.trial_id === row.trial_id
        && t.group === row.group);
      if (!s) {
        s = { metric, trial_id: row.trial_id, group: row.group, x: [], y: [],
          counter: counters.has(metric) };
        series.push(s);
      }
      s.x.push(row.steps_completed);
      s.y.push(value);
    }
  }

  // A new run of a trial rolled back what its earlier runs reported past a step.
  function rollBack(series, back) {
    for (const s of series) {
      if (s.trial_id !== back.trial_id) continue;
      const keep = s.x.findIndex((x) => x > back.steps_completed);
      if (keep >= 0) { s.x.length = keep; s.y.length = keep; }
    }
  }

  function stateBadge(element, state) {
    element.textContent = state;
    element.className = "state state-" + state.toLowerCase();
  }

  function shortValue(value) {
    if (typeof value === "number" && !Number.isInteger(value)) {
      return String(Number(value.toPrecision(4)));
    }
    if (Array.isArray(value)) return "[" + value.map(shortValue).join(", ") + "]";
    if (value && typeof value === "object") return "{" + hparamsText(value) + "}";
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  function hparamsText(hparams) {
    return Object.entries(hparams || {}).map(([k, v]) => k + "=" + shortValue(v)).join(", ");
  }

  // A table row of empty cells with these classes (one per column), and its cells.
  function newRow(classes) {
    const row = document.createElement("tr");
    const cells = classes.map((cls) => {
      const td = document.createElement("td");
      if (cls) td.className = cls;
      row.appendChild(td);
      return td;
    });
    return [row, cells];
  }

  function trialRow(tbody, trial, logsBase) {
    const [row, cells] = newRow(["", "", "hparams", "num steps", "num", "num", "", ""]);
    row.dataset.trial = trial.id;
    cells[0].textContent = trial.id;
    cells[1].appendChild(document.createElement("span"));
    cells[2].textContent = hparamsText(trial.hparams);
    cells[2].title = JSON.stringify(trial.hparams);
    cells[5].textContent = "0";
    const logs = document.createElement("a");
    logs.href = logsBase + trial.id + "/logs";
    logs.textContent = "Logs";
    cells[7].appendChild(logs);
    tbody.appendChild(row);
    return row;
  }

  function applyState(state, logsBase) {
    const badge = document.getElementById("state");
    if (badge) stateBadge(badge, state.shown_state || state.state);
    const progress = document.getElementById("progress");
    if (progress && state.progress !== null && state.progress !== undefined) {
      progress.replaceChildren();
      const bar = document.createElement("progress");
      bar.max = 1;
      bar.value = state.progress;
      const percent = document.createElement("span");
      percent.className = "percent";
      percent.textContent = Math.round(state.progress * 100) + "%";
      progress.append(bar, " ", percent);
    }
    const table = document.getElementById("trials");
    if (!table || !state.trials.length) return;
    table.hidden = false;
    const none = document.getElementById("no-trials");
    if (none) none.remove();
    const tbody = table.tBodies[0];
    for (const trial of state.trials) {
      const row = tbody.querySelector('tr[data-trial="' + trial.id + '"]')
        || trialRow(tbody, trial, logsBase);
      stateBadge(row.cells[1].querySelector(".state") || row.cells[1].firstChild,
        trial.shown_state || trial.state);
      row.querySelector("td.steps").textContent = trial.steps_completed;
    }
  }

  function follow(box, series, redraw) {
    const counters = new Set((box.dataset.counters || "").split(" ").filter(Boolean));
    const logsBase = box.dataset.logs;
    let after = Number(box.dataset.after || 0);
    let drawing = null;
    // Rows come in bursts: the charts are redrawn at most 5 times a second.
    const schedule = () => {
      if (drawing === null) drawing = setTimeout(() => { drawing = null; redraw(); }, 200);
    };
    const open = () => {
      // An EventSource sends no headers of its own: the hub's sign-in takes the page's XSRF
      // token from the query instead.
      const source = new EventSource(box.dataset.stream + "?after_id=" + after
        + "&_xsrf=" + encodeURIComponent(xsrf));
      source.addEventListener("metrics", (event) => {
        const row = JSON.parse(event.data);
        after = Math.max(after, row.id);
        appendRow(series, counters, row);
        schedule();
      });
      source.addEventListener("rolled_back", (event) => {
        rollBack(series, JSON.parse(event.data));
        schedule();
      });
      source.addEventListener("state", (event) => applyState(JSON.parse(event.data), logsBase));
      source.addEventListener("end", () => source.close());
      source.addEventListener("reconnect", (event) => {
        source.close();
        after = JSON.parse(event.data).after_id;
        open();
      });
      // The master may be restarting: go on from the last row drawn.
      source.onerror = () => {
        source.close();
        setTimeout(open, 2000);
      };
    };
    open();
  }

  // --- the dashboard's list: each row follows its experiment; new ones come in on top -------
  function when(iso) {
    return iso ? iso.replace("T", " ").slice(0, 19) : "";
  }

  function progressCell(cell, progress) {
    cell.replaceChildren();
    if (progress === null || progress === undefined) return;
    const bar = document.createElement("progress");
    bar.max = 1;
    bar.value = progress;
    cell.append(bar, " " + Math.round(progress * 100) + "%");
  }

  function experimentRow(tbody, e, base) {
    const [row, cells] = newRow(["", "", "", "", "num trials", "progress", "", "ended"]);
    row.dataset.experiment = e.id;
    for (const [cell, text] of [[cells[0], String(e.id)], [cells[1], e.name]]) {
      const link = document.createElement("a");
      link.href = base + "experiments/" + e.id;
      link.textContent = text;
      cell.appendChild(link);
    }
    cells[2].appendChild(document.createElement("span"));
    cells[3].textContent = e.owner;
    cells[6].textContent = when(e.created_at);
    tbody.prepend(row);
    return row;
  }

  function followList(table) {
    const base = table.dataset.base;
    const insert = table.dataset.insert === "true";
    const tbody = table.tBodies[0];
    const show = (e) => {
      let row = tbody.querySelector('tr[data-experiment="' + e.id + '"]');
      if (!row) {
        if (!insert) return;
        row = experimentRow(tbody, e, base);
        table.hidden = false;
        const none = document.getElementById("no-experiments");
        if (none) none.remove();
      }
      stateBadge(row.cells[2].firstChild, e.state);
      row.querySelector("td.trials").textContent = e.num_trials;
      progressCell(row.querySelector("td.progress"), e.progress);
      row.querySelector("td.ended").textContent = when(e.ended_at);
    };
    const open = () => {
      const sep = table.dataset.stream.includes("?") ? "&" : "?";
      const source = new EventSource(table.dataset.stream + sep + "_xsrf="
        + encodeURIComponent(xsrf));
      // The snapshot brings rows up to date that changed since the page was made.
      source.addEventListener("snapshot", (event) => {
        for (const e of JSON.parse(event.data).experiments) {
          if (tbody.querySelector('tr[data-experiment="' + e.id + '"]')) show(e);
        }
      });
      source.addEventListener("experiment", (event) => show(JSON.parse(event.data)));
      source.addEventListener("reconnect", () => { source.close(); open(); });
      source.onerror = () => { source.close(); setTimeout(open, 2000); };
    };
    open();
  }

  function charts(box) {
    const source = document.getElementById("chart-data");
    const series = JSON.parse(source.textContent);
    const redraw = () => drawCharts(box, series);
    chartControls(box, redraw);
    redraw();
    if (box.dataset.live === "true") follow(box, series, redraw);
  }

  // --- logs: append new lines while the trial runs ------------------------------------------
  function logLine(line) {
    const row = document.createElement("span");
    row.className = "line " + line.stdtype + " level-" + (line.level || "info");
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

  // --- the search: parallel coordinates, and each hyperparameter against the metric ------
  function drawSearch(search) {
    if (!window.Plotly) return;
    const config = { responsive: true, displaylogo: false };
    window.Plotly.newPlot(document.getElementById("search-parallel"), [search.parallel],
      { margin: { l: 70, r: 70, t: 40, b: 20 }, height: 360 }, config);
    const box = document.getElementById("search-scatter");
    for (const s of search.scatters) {
      const div = document.createElement("div");
      div.className = "chart";
      const title = document.createElement("h3");
      title.textContent = s.name;
      const plot = document.createElement("div");
      plot.className = "plot";
      div.append(title, plot);
      box.appendChild(div);
      const log = s.log && s.x.every((x) => typeof x === "number" && x > 0);
      window.Plotly.newPlot(plot, [{
        x: s.x, y: s.y, type: "scatter", mode: "markers",
        text: s.trial_ids.map((id) => "trial " + id), hoverinfo: "text+x+y",
        marker: { size: 9, color: s.trial_ids.map(colourOf) },
      }], {
        xaxis: { title: { text: label(s.name), standoff: 4 }, type: log ? "log" : "-" },
        yaxis: { title: { text: label(search.metric) } },
        margin: { l: 60, r: 20, t: 10, b: 45 }, height: 280, showlegend: false,
      }, config);
    }
  }

  // --- tables sorted by a click on a column's heading --------------------------------------
  function sortable(table) {
    const key = (cell) => {
      const text = cell ? cell.textContent.trim() : "";
      const number = Number(text);
      return text !== "" && !Number.isNaN(number) ? number : text.toLowerCase();
    };
    for (const [index, th] of Array.from(table.tHead.rows[0].cells).entries()) {
      th.classList.add("sort");
      th.title = "Sort by " + th.textContent;
      th.addEventListener("click", () => {
        const down = th.dataset.sorted === "up";
        for (const other of table.tHead.rows[0].cells) delete other.dataset.sorted;
        th.dataset.sorted = down ? "down" : "up";
        const rows = Array.from(table.tBodies[0].rows);
        rows.sort((a, b) => {
          const [x, y] = [key(a.cells[index]), key(b.cells[index])];
          // Empty cells (no metric yet) go last either way.
          if (x === "" || y === "") return (x === "") - (y === "");
          const order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0)
            : typeof x === "number" ? -1 : 1;
          return down ? -order : order;
        });
        table.tBodies[0].append(...rows);
      });
    }
  }

  // --- destructive actions ask first, naming what stops and whose it is -------------------
  document.addEventListener("submit", (event) => {
    const question = event.target.dataset ? event.target.dataset.confirm : undefined;
    if (question && !window.confirm(question)) event.preventDefault();
  });

  const box = document.getElementById("charts");
  if (box) charts(box);
  const list = document.querySelector("table#experiments[data-stream]");
  if (list) followList(list);
  const search = document.getElementById("search-data");
  if (search) drawSearch(JSON.parse(search.textContent));
  for (const table of document.querySelectorAll("table.sortable")) sortable(table);
  const pre = document.getElementById("logs");
  if (pre) followLogs(pre);
})();
