// The browser side of det_hub.widgets.PlotlyChart: a Plotly chart of the model's `traces` and
// `plot_layout`, kept up to date by the kernel's patches.
//
// This module is small on purpose: the widget framework gives a model 2 s to load its module,
// so Plotly.js (4.8 MB) is not part of it. It is loaded once per page, from the notebook
// server (det_hub's server extension serves it, and the browser keeps it), else from the
// kernel over the widget's own channel; every chart of the page shares it.

// The promise of Plotly.js on `window`, shared with det_hub's JupyterLab panel, which starts
// loading it once a notebook that draws these charts is open (labextension/src/model/
// notebookCharts.ts): whichever asks first loads it.
const SHARED = "__det_hub_plotly__";

// The notebook server's base URL, where JupyterLab and Notebook 7 say it; null elsewhere.
function serverBase() {
  const config = document.getElementById("jupyter-config-data");
  if (!config) return null;
  try {
    return JSON.parse(config.textContent || "{}").baseUrl || null;
  } catch {
    return null;
  }
}

// Runs a classic script (Plotly.js sets `window.Plotly`).
function runScript(src, what) {
  return new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = src;
    script.async = true;
    script.onload = () => resolve();
    script.onerror = () => reject(new Error(`${what} could not be loaded`));
    document.head.appendChild(script);
  });
}

async function fromServer(version) {
  const base = serverBase();
  if (!base) throw new Error("this page names no notebook server");
  const url = `${base.replace(/\/?$/, "/")}det-hub/static/plotly.min.js?v=${version}`;
  await runScript(url, url);
  if (!window.Plotly) throw new Error(`${url} did not define window.Plotly`);
}

// Asks the kernel for Plotly.js: it answers `{plotly_js: <version>}` with the file as buffer.
function fromKernel(model) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      model.off("msg:custom", answer);
      reject(new Error("the kernel did not send it within 60 s"));
    }, 60000);
    function answer(msg, buffers) {
      if (!msg || !("plotly_js" in msg)) return;
      clearTimeout(timer);
      model.off("msg:custom", answer);
      if (!buffers || !buffers.length) {
        reject(new Error(msg.error || "the kernel has no Plotly.js"));
        return;
      }
      const url = URL.createObjectURL(new Blob([buffers[0]], { type: "text/javascript" }));
      runScript(url, "the kernel's Plotly.js").then(() => {
        if (window.Plotly) resolve();
        else reject(new Error("the kernel's Plotly.js did not define window.Plotly"));
      }, reject).finally(() => URL.revokeObjectURL(url));
    }
    model.on("msg:custom", answer);
    model.send({ request: "plotly.js" });
  });
}

function loadPlotly(model) {
  if (window.Plotly && window.Plotly.react) return Promise.resolve(window.Plotly);
  if (!window[SHARED]) {
    window[SHARED] = (async () => {
      let first;
      try {
        await fromServer(model.get("plotly_version"));
      } catch (e) {
        first = e;
        try {
          await fromKernel(model);
        } catch (second) {
          throw new Error(`Plotly.js could not be loaded, from the notebook server `
            + `(${first.message}) nor from the kernel (${second.message})`);
        }
      }
      return window.Plotly;
    })();
    // A later chart tries again rather than showing this failure forever.
    window[SHARED].catch(() => { window[SHARED] = null; });
  }
  return window[SHARED];
}

// The kernel's patches, applied to the model here (never sent back): each view redraws on
// the change. A patch that does not follow what is held (one before it was missed) asks the
// kernel for it all.
function applyPatches(model, patches) {
  let data = model.get("traces") || [];
  for (const patch of patches) {
    if (patch.op === "reset") {
      data = patch.data;
    } else if (patch.op === "set") {
      if (patch.index > data.length) {
        model.send({ resync: true });
        return;
      }
      data = data.slice();
      data[patch.index] = patch.trace;
    } else if (patch.op === "extend") {
      const trace = data[patch.index];
      if (!trace || (trace.x || []).length !== patch.start) {
        model.send({ resync: true });
        return;
      }
      data = data.slice();
      data[patch.index] = { ...trace, x: trace.x.concat(patch.x), y: trace.y.concat(patch.y) };
    }
  }
  model.set("traces", data);
}

function initialize({ model }) {
  const onMessage = (msg) => {
    if (msg && Array.isArray(msg.patches)) applyPatches(model, msg.patches);
  };
  model.on("msg:custom", onMessage);
  // Plotly.js starts loading with the first model, before any view asks for it; a failure
  // is shown by the views.
  loadPlotly(model).catch(() => {});
  return () => model.off("msg:custom", onMessage);
}

function render({ model, el }) {
  const note = document.createElement("div");
  note.className = "det-hub-chart-status";
  note.style.cssText = "font-size: 13px; padding: 2px 4px; min-height: 1em;";
  const graph = document.createElement("div");
  graph.className = "det-hub-chart";
  el.append(note, graph);

  let Plotly = null;
  let frame = 0;
  let gone = false;
  const draw = () => {
    frame = 0;
    if (gone || !Plotly) return;
    // Copies: Plotly writes into the objects it is given.
    const data = (model.get("traces") || []).map((trace) => ({ ...trace }));
    const layout = { autosize: true, ...(model.get("plot_layout") || {}) };
    // An axis whose values are all the same (a single point) is centred on that value,
    // rather than drawn from -1 to 1.
    for (const [axis, key] of [["xaxis", "x"], ["yaxis", "y"]]) {
      const values = data.flatMap((trace) => trace[key] || [])
        .filter((v) => typeof v === "number" && Number.isFinite(v));
      const same = values.length && values.every((v) => v === values[0])
        && (layout[axis] || {}).type !== "log";
      const pad = same ? Math.abs(values[0]) * 0.1 || 1 : 0;
      layout[axis] = same
        ? { ...layout[axis], range: [values[0] - pad, values[0] + pad], autorange: false }
        : { ...layout[axis], autorange: true };
    }
    Plotly.react(graph, data, layout, { responsive: true, displaylogo: false });
  };
  // One redraw per frame, however many patches came.
  const schedule = () => {
    if (!frame) frame = requestAnimationFrame(draw);
  };
  const showStatus = () => {
    const text = model.get("status") || "";
    note.textContent = text;
    note.style.color = model.get("failed") ? "#c62828" : "#666";
  };
  model.on("change:traces", schedule);
  model.on("change:plot_layout", schedule);
  model.on("change:status", showStatus);
  model.on("change:failed", showStatus);
  showStatus();
  // The output area may be laid out after the first drawing (a page restoring its widgets):
  // the chart follows its width.
  const resized = new ResizeObserver(() => {
    if (Plotly && graph.offsetWidth > 0 && graph.classList.contains("js-plotly-plot")) {
      Plotly.Plots.resize(graph);
    }
  });
  resized.observe(graph);
  loadPlotly(model).then((loaded) => {
    Plotly = loaded;
    draw();
  }, (error) => {
    note.textContent = `det_hub: ${error.message}`;
    note.style.color = "#c62828";
    console.error("det_hub chart:", error);
  });
  return () => {
    gone = true;
    resized.disconnect();
    if (frame) cancelAnimationFrame(frame);
    model.off("change:traces", schedule);
    model.off("change:plot_layout", schedule);
    model.off("change:status", showStatus);
    model.off("change:failed", showStatus);
    if (Plotly) Plotly.purge(graph);
  };
}

export default { initialize, render };
