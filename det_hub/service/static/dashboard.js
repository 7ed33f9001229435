// det_hub's pages: an experiment's metric charts (Plotly.js), the follower of a trial's
// logs, the live experiment list and admin page, and the question a destructive button asks
// before it posts. The charts and the logs
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

  // --- Plotly.js, loaded once the page is shown: its 4.8 MB take the better part of a second
  // to compile, which the page's text, tables and controls need not wait for ------------------
  const plotlyWaiting = [];
  let plotlyAsked = false;
  function withPlotly(draw) {
    if (window.Plotly) { draw(); return; }
    plotlyWaiting.push(draw);
    const source = document.getElementById("plotly-src");
    if (plotlyAsked || !source) return;
    plotlyAsked = true;
    // After the next frame is painted.
    requestAnimationFrame(() => setTimeout(() => {
      const script = document.createElement("script");
      script.src = source.href;
      script.onload = () => { for (const waiting of plotlyWaiting.splice(0)) waiting(); };
      script.onerror = () => {
        for (const box of document.querySelectorAll("#charts, #search-parallel")) {
          const why = document.createElement("p");
          why.className = "empty";
          why.textContent = "Plotly.js could not be loaded from " + source.href
            + ": the charts cannot be drawn.";
          box.prepend(why);
        }
      };
      document.body.appendChild(script);
    }, 0));
  }

  // Runs `draw` once `element` has come near the window, and at once from then on: what is
  // below the fold costs nothing until it is scrolled to.
  function whenShown(element, draw) {
    if (element.dataset.shown === "true" || !("IntersectionObserver" in window)) {
      draw();
      return;
    }
    element.pendingDraw = draw;
    if (element.watcher) return;
    element.watcher = new IntersectionObserver((entries) => {
      if (!entries.some((entry) => entry.isIntersecting)) return;
      element.watcher.disconnect();
      element.dataset.shown = "true";
      element.pendingDraw();
    }, { rootMargin: "200px" });
    element.watcher.observe(element);
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
    const name = label((s.label || "trial " + s.trial_id) + " " + s.group);
    const mode = s.x.length > 1 ? "lines" : "markers";
    const dash = s.group === "validation" ? "solid" : "dot";
    // Copies: the stream appends to s.x and s.y in place, and Plotly.react redraws a trace
    // only when it is given new arrays.
    const main = { x: s.x.slice(), y: s.y.slice(), type: "scatter", mode, name,
      legendgroup: name, line: { color: colour, dash }, marker: { color: colour } };
    if (!settings.smoothing || s.x.length < 3) return [main];
    return [
      { ...main, name: name + " (raw)", showlegend: false, hoverinfo: "skip", opacity: 0.25 },
      { ...main, y: smooth(s.y, settings.smoothing) },
    ];
  }

  // The trials ticked in the trials table: when there are any, the charts draw only them.
  const ticked = new Set();

  function drawCharts(box, series) {
    if (!window.Plotly) return;
    const byMetric = new Map();
    for (const s of series) {
      colourOf(s.trial_id);
      if (s.counter && !settings.counters) continue;
      if (ticked.size && !ticked.has(s.trial_id)) continue;
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

  // Nested hyperparameters under dotted names, as the table's columns name them.
  function flatten(hparams, prefix) {
    const flat = {};
    for (const [key, value] of Object.entries(hparams || {})) {
      if (value && typeof value === "object" && !Array.isArray(value)) {
        Object.assign(flat, flatten(value, (prefix || "") + key + "."));
      } else {
        flat[(prefix || "") + key] = value;
      }
    }
    return flat;
  }

  // A new row of the trials table: a cell per column, as the page renders one.
  function trialRow(table, trial, logsBase) {
    const columns = JSON.parse(table.dataset.hparams || "[]");
    const [row, cells] = newRow(["pick", "", "state-cell", ...columns.map(() => "num hp"),
      "num steps", "num metric", "num restarts", "checkpoint", ""]);
    row.dataset.trial = trial.id;
    const tick = document.createElement("input");
    tick.type = "checkbox";
    tick.setAttribute("aria-label", "Draw trial " + trial.id + " on the charts");
    cells[0].appendChild(tick);
    const page = document.createElement("a");
    page.href = logsBase + trial.id;
    page.textContent = trial.id;
    cells[1].appendChild(page);
    cells[2].appendChild(document.createElement("span"));
    const flat = flatten(trial.hparams);
    columns.forEach((name, i) => {
      cells[3 + i].textContent = shortValue(flat[name]);
      cells[3 + i].title = JSON.stringify(flat[name]);
    });
    const logs = document.createElement("a");
    logs.href = logsBase + trial.id + "/logs";
    logs.textContent = "Logs";
    cells[cells.length - 1].appendChild(logs);
    table.tBodies[0].appendChild(row);
    return row;
  }

  function applyState(state, logsBase) {
    // A trial's own page shows its state, batches, metric and restarts.
    for (const trial of state.trials) {
      for (const badge of document.querySelectorAll('[data-trial-state="' + trial.id + '"]')) {
        stateBadge(badge, trial.shown_state || trial.state);
        const facts = { "trial-steps": trial.steps_completed, "trial-restarts": trial.restarts,
          "trial-metric": trial.searcher_metric_value === null ? "none yet"
            : String(Number(trial.searcher_metric_value.toPrecision(6))) };
        for (const [id, text] of Object.entries(facts)) {
          const cell = document.getElementById(id);
          if (cell) cell.textContent = text;
        }
      }
    }
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
    for (const id of ["trials", "trial-tools"]) document.getElementById(id).hidden = false;
    document.getElementById("no-trials").hidden = true;
    const tbody = table.tBodies[0];
    for (const trial of state.trials) {
      const row = tbody.querySelector('tr[data-trial="' + trial.id + '"]')
        || trialRow(table, trial, logsBase);
      const cell = row.querySelector("td.state-cell");
      stateBadge(cell.querySelector(".state") || cell.firstChild, trial.shown_state || trial.state);
      row.querySelector("td.steps").textContent = trial.steps_completed;
      row.querySelector("td.metric").textContent = trial.searcher_metric_value === null
        ? "" : String(Number(trial.searcher_metric_value.toPrecision(6)));
      row.querySelector("td.restarts").textContent = trial.restarts;
      const checkpoint = row.querySelector("td.checkpoint");
      if (trial.latest_checkpoint && checkpoint.textContent !== trial.latest_checkpoint.slice(0, 8)) {
        const code = document.createElement("code");
        code.textContent = trial.latest_checkpoint.slice(0, 8);
        checkpoint.replaceChildren(code);
      }
    }
    trialFilter.apply();
  }

  function follow(box, series, redraw) {
    const counters = new Set((box.dataset.counters || "").split(" ").filter(Boolean));
    const logsBase = box.dataset.logs;
    // A trial's page follows its experiment's stream and draws that trial's rows only.
    const only = box.dataset.trial ? Number(box.dataset.trial) : null;
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
        if (only !== null && row.trial_id !== only) return;
        appendRow(series, counters, row);
        schedule();
      });
      source.addEventListener("rolled_back", (event) => {
        rollBack(series, JSON.parse(event.data));
        schedule();
      });
      source.addEventListener("state", (event) => applyState(JSON.parse(event.data), logsBase));
      source.addEventListener("search", (event) => drawSearch(JSON.parse(event.data)));
      source.addEventListener("rungs", (event) => drawRungs(JSON.parse(event.data)));
      source.addEventListener("checkpoints", (event) => drawCheckpoints(JSON.parse(event.data)));
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
    const [row, cells] = newRow(["", "", "", "", "num trials", "progress", "", "ended", "pick"]);
    row.dataset.experiment = e.id;
    const tick = document.createElement("input");
    Object.assign(tick, { type: "checkbox", name: "id", value: String(e.id) });
    tick.setAttribute("form", "compare");
    tick.setAttribute("aria-label", "Compare experiment " + e.id);
    cells[8].appendChild(tick);
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
        table.hidden = document.getElementById("compare").hidden = false;
        const none = document.getElementById("no-experiments");
        if (none) none.remove();
      }
      stateBadge(row.cells[2].firstChild, e.state);
      row.querySelector("td.trials").textContent = e.num_trials;
      progressCell(row.querySelector("td.progress"), e.progress);
      row.querySelector("td.ended").textContent = when(e.ended_at);
    };
    followStream(table.dataset.stream, {
      // The snapshot brings rows up to date that changed since the page was made.
      snapshot: (data) => {
        for (const e of data.experiments) {
          if (tbody.querySelector('tr[data-experiment="' + e.id + '"]')) show(e);
        }
      },
      experiment: show,
    });
  }

  // --- the admin page: the pools, agents and queue follow the cluster's stream ------------
  // The master sends each section that changed as the page's own template renders it, forms
  // and the questions they ask included. A section whose field is being typed in or chosen
  // from keeps what it shows until the focus leaves it, then shows the latest.
  function followCluster(box) {
    const latest = new Map();
    const editing = (section) => section.contains(document.activeElement)
      && document.activeElement.matches("input, select, textarea");
    const show = (section) => {
      if (!latest.has(section) || editing(section)) return;
      section.innerHTML = latest.get(section);
      latest.delete(section);
    };
    for (const section of box.querySelectorAll("[data-section]")) {
      // Once the focus has moved on (focusout comes before the next element has it).
      section.addEventListener("focusout", () => setTimeout(() => show(section), 0));
    }
    followStream(box.dataset.stream, {
      sections: (sections) => {
        for (const [name, html] of Object.entries(sections)) {
          const section = box.querySelector('[data-section="' + name + '"]');
          if (!section) continue;
          latest.set(section, html);
          show(section);
        }
      },
    });
  }

  // --- a page's stream: each event's JSON to its listener, connected again when it breaks ---
  // An EventSource sends no headers of its own: the hub's sign-in takes the page's XSRF token
  // from the query instead. The master asks for a new connection (`reconnect`) when it stops;
  // each connection starts with a fresh snapshot, so nothing is missed across one.
  function followStream(url, listeners) {
    const open = () => {
      const source = new EventSource(url + (url.includes("?") ? "&" : "?") + "_xsrf="
        + encodeURIComponent(xsrf));
      for (const [name, listener] of Object.entries(listeners)) {
        source.addEventListener(name, (event) => listener(JSON.parse(event.data)));
      }
      source.addEventListener("reconnect", () => { source.close(); open(); });
      source.onerror = () => { source.close(); setTimeout(open, 2000); };
    };
    open();
  }

  function charts(box) {
    const source = document.getElementById("chart-data");
    const series = JSON.parse(source.textContent);
    const redraw = () => drawCharts(box, series);
    redrawCharts = redraw;
    chartControls(box, redraw);
    withPlotly(redraw);
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

  // --- the search: parallel coordinates, each hyperparameter against the metric, and how
  // much each one matters; redrawn when a trial's metric changes -----------------------------
  let searchShown = null;
  let searchLatest = null;
  let importanceFor = null;
  function drawSearch(search) {
    searchLatest = search;
    const section = document.getElementById("search-section");
    if (!search || !section) return;
    section.hidden = false;
    const text = JSON.stringify(search);
    if (text !== importanceFor) {
      importanceFor = text;
      importance.load();
    }
    // The parallel coordinates are WebGL, slow to draw without a GPU: drawn when shown, and
    // in a task of their own, after the metric charts are painted.
    withPlotly(() => setTimeout(() => whenShown(section, () => drawSearchCharts(searchLatest))));
  }

  function drawSearchCharts(search) {
    const text = JSON.stringify(search);
    if (text === searchShown) return;
    searchShown = text;
    const config = { responsive: true, displaylogo: false };
    const parallel = document.getElementById("search-parallel");
    // What was dragged along an axis stays picked as new results come in.
    const before = parallel.data ? parallel.data[0].dimensions : [];
    for (const d of search.parallel.dimensions) {
      const old = before.find((b) => b.label === d.label);
      if (old && old.constraintrange) d.constraintrange = old.constraintrange;
    }
    window.Plotly.react(parallel, [search.parallel],
      { margin: { l: 70, r: 70, t: 40, b: 20 }, height: 360 }, config);
    if (!parallel.dataset.picking) {
      parallel.dataset.picking = "true";
      parallel.on("plotly_restyle", () => trialFilter.pick(pickedOnParallel(parallel)));
    }
    trialFilter.pick(pickedOnParallel(parallel));
    const box = document.getElementById("search-scatter");
    for (const plot of box.querySelectorAll(".plot")) window.Plotly.purge(plot);
    box.replaceChildren();
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

  // The trials inside every range dragged on the parallel coordinates; null when none is.
  function pickedOnParallel(gd) {
    const trace = gd.data[0];
    const ranges = trace.dimensions.map((d) => {
      const r = d.constraintrange;
      if (!r || !r.length) return null;
      return Array.isArray(r[0]) ? r : [r];
    });
    if (ranges.every((r) => r === null)) return null;
    const inside = (value, r) => r.some(([low, high]) => value >= low && value <= high);
    return new Set(trace.customdata.filter((id, i) =>
      trace.dimensions.every((d, k) => ranges[k] === null || inside(d.values[i], ranges[k]))));
  }

  // Each hyperparameter's share of the metric's variance (optuna's fANOVA, in the master).
  const importance = {
    loading: false,
    again: false,
    async load() {
      const box = document.getElementById("search-importance");
      if (!box) return;
      if (this.loading) { this.again = true; return; }
      this.loading = true;
      try {
        showImportance(box, await getJSON(box.dataset.url));
      } catch (e) {
        const why = document.createElement("p");
        why.className = "empty";
        why.textContent = "Hyperparameter importance is not available: " + e.message;
        box.replaceChildren(why);
      } finally {
        this.loading = false;
      }
      if (this.again) { this.again = false; this.load(); }
    },
  };

  function showImportance(box, answer) {
    if (!answer.importance.length) {
      const none = document.createElement("p");
      none.className = "empty";
      none.textContent = "Importance needs trials whose " + answer.metric + " differs and "
        + "whose hyperparameters differ.";
      box.replaceChildren(none);
      return;
    }
    const list = document.createElement("ol");
    list.id = "importance-list";
    for (const { name, importance: share } of answer.importance) {
      const item = document.createElement("li");
      const title = document.createElement("span");
      title.className = "name";
      title.textContent = name;
      const bar = document.createElement("span");
      bar.className = "bar";
      bar.style.width = (share * 100).toFixed(1) + "%";
      const figure = document.createElement("span");
      figure.className = "share";
      figure.textContent = (share * 100).toFixed(1) + "%";
      item.append(title, bar, figure);
      list.appendChild(item);
    }
    const note = document.createElement("p");
    note.className = "muted";
    note.textContent = "Share of the variance of " + answer.metric + " each hyperparameter "
      + "explains (fANOVA over " + answer.trials + " trials).";
    box.replaceChildren(list, note);
  }

  // --- the trials table: filtered by state and by what is picked on the search view; the
  // ticked trials are the ones the charts draw ------------------------------------------------
  let redrawCharts = () => {};
  const trialFilter = {
    state: "",
    picked: null,
    apply() {
      const table = document.getElementById("trials");
      if (!table) return;
      const states = new Set();
      let shown = 0;
      for (const row of table.tBodies[0].rows) {
        const state = row.querySelector("td.state-cell .state").textContent;
        states.add(state);
        row.hidden = Boolean((this.state && state !== this.state)
          || (this.picked && !this.picked.has(Number(row.dataset.trial))));
        if (!row.hidden) shown += 1;
      }
      const select = document.getElementById("trial-state");
      const offered = new Set(Array.from(select.options, (o) => o.value));
      for (const state of [...states].sort()) {
        if (!offered.has(state)) select.add(new Option(state, state));
      }
      const note = document.getElementById("trial-picked");
      note.hidden = document.getElementById("trial-unpick").hidden = this.picked === null;
      note.textContent = "Listing " + shown + " of " + table.tBodies[0].rows.length
        + " trials: those picked on the parallel coordinates.";
    },
    pick(ids) { this.picked = ids; this.apply(); },
  };

  function trialTools(table) {
    const select = document.getElementById("trial-state");
    select.addEventListener("change", () => { trialFilter.state = select.value; trialFilter.apply(); });
    document.getElementById("trial-unpick").addEventListener("click", () => {
      const parallel = document.getElementById("search-parallel");
      if (parallel && parallel.data) {
        for (const d of parallel.data[0].dimensions) delete d.constraintrange;
        window.Plotly.react(parallel, parallel.data, parallel.layout);
      }
      trialFilter.pick(null);
    });
    table.addEventListener("change", (event) => {
      const tick = event.target;
      if (!tick.matches || !tick.matches("td.pick input")) return;
      const id = Number(tick.closest("tr").dataset.trial);
      if (tick.checked) ticked.add(id); else ticked.delete(id);
      redrawCharts();
    });
    trialFilter.apply();
  }

  // --- the rungs of an ASHA search and the experiment's checkpoints -------------------------
  function cellsRow(tbody, values, classes) {
    const [row, cells] = newRow(classes || values.map(() => ""));
    values.forEach((value, i) => { cells[i].textContent = value; });
    tbody.appendChild(row);
    return row;
  }

  function listTable(headings, numeric) {
    const table = document.createElement("table");
    table.className = "list";
    const head = table.createTHead().insertRow();
    for (const heading of headings) {
      const th = document.createElement("th");
      th.textContent = heading;
      head.appendChild(th);
    }
    table.createTBody();
    return [table, headings.map((h, i) => (numeric.includes(i) ? "num" : ""))];
  }

  function drawRungs(rungs) {
    const section = document.getElementById("rungs-section");
    if (!section) return;
    section.hidden = !rungs;
    if (!rungs) return;
    const [table, classes] = listTable(["Bracket", "Rung", "Length", "Reported", "Best "
      + (rungs.smaller_is_better ? "(lowest)" : "(highest)"), "Promoted",
    "Trials, best first", "Training towards it"], [0, 1, 2, 3, 4, 5]);
    table.id = "rung-table";
    for (const bracket of rungs.brackets) {
      for (const rung of bracket.rungs) {
        cellsRow(table.tBodies[0], [bracket.index, rung.index, rung.length, rung.reported,
          rung.best_metric === null ? "" : String(Number(rung.best_metric.toPrecision(6))),
          rung.promoted, rung.trial_ids.join(", "), rung.training.join(", ")], classes);
      }
    }
    document.getElementById("rungs").replaceChildren(table);
  }

  function sizeText(bytes) {
    let value = bytes || 0;
    for (const unit of ["B", "KiB", "MiB", "GiB"]) {
      if (value < 1024 || unit === "GiB") return unit === "B" ? value + " B" : value.toFixed(1) + " " + unit;
      value /= 1024;
    }
    return "";
  }

  // What a checkpoint offers: the code that loads it in a notebook, and, to those who may
  // change its experiment, registering it as a model's next version.
  function checkpointUse(cell, c, registerBase) {
    const code = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = "Code to load";
    const text = document.createElement("pre");
    text.textContent = "import det_hub\n\nmodel = det_hub.load_checkpoint(\"" + c.uuid + "\")";
    code.append(summary, text);
    cell.appendChild(code);
    if (!registerBase || c.state !== "COMPLETED") return;
    const form = document.createElement("form");
    form.method = "post";
    form.action = registerBase + c.uuid + "/register";
    form.className = "register";
    for (const [name, value] of [["_xsrf", xsrf], ["next", location.pathname]]) {
      const field = document.createElement("input");
      Object.assign(field, { type: "hidden", name, value });
      form.appendChild(field);
    }
    const model = document.createElement("input");
    Object.assign(model, { name: "model", required: true, placeholder: "model name",
      pattern: "[^/]+", title: "the model to register it under (made if it is new)" });
    const button = document.createElement("button");
    button.type = "submit";
    button.textContent = "Register";
    form.append(model, " ", button);
    cell.appendChild(form);
  }

  function drawCheckpoints(checkpoints) {
    const table = document.getElementById("checkpoints");
    if (!table) return;
    if (table.dataset.trial) {
      checkpoints = checkpoints.filter((c) => c.trial_id === Number(table.dataset.trial));
    }
    table.hidden = !checkpoints.length;
    document.getElementById("no-checkpoints").hidden = Boolean(checkpoints.length);
    const tbody = document.createElement("tbody");
    for (const c of checkpoints) {
      const row = cellsRow(tbody, ["", c.trial_id, c.steps_completed, c.state,
        sizeText(c.size), when(c.report_time), ""], ["", "", "num", "", "num", "", "use"]);
      const uuid = document.createElement("code");
      uuid.textContent = c.uuid;
      row.cells[0].appendChild(uuid);
      checkpointUse(row.cells[6], c, table.dataset.register);
    }
    table.replaceChild(tbody, table.tBodies[0]);
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
  const cluster = document.querySelector("#cluster[data-stream]");
  if (cluster) followCluster(cluster);
  const search = document.getElementById("search-data");
  if (search) drawSearch(JSON.parse(search.textContent));
  const rungs = document.getElementById("rung-data");
  if (rungs) drawRungs(JSON.parse(rungs.textContent));
  const checkpoints = document.getElementById("checkpoint-data");
  if (checkpoints) drawCheckpoints(JSON.parse(checkpoints.textContent));
  const trials = document.getElementById("trials");
  if (trials && trials.dataset.hparams) trialTools(trials);
  for (const table of document.querySelectorAll("table.sortable")) sortable(table);
  const pre = document.getElementById("logs");
  if (pre) followLogs(pre);
})();
