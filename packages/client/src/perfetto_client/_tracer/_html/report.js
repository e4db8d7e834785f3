// perfetto-trace's HTML report: draws the data that _html_report.py puts in #data.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const $ = (id) => document.getElementById(id);
  const ROW = 18;
  const tip = $("tip");

  function ms(ns) {
    return (ns / 1e6).toLocaleString("en-US", { minimumFractionDigits: 3, maximumFractionDigits: 3 });
  }
  function pct(part, whole) {
    return whole > 0 ? ((100 * part) / whole).toFixed(2) + " %" : "0.00 %";
  }
  function colour(name) {
    let h = 0;
    for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) | 0;
    const u = (h >>> 0) % 1000;
    return "hsl(" + (10 + (u % 45)) + "," + (60 + (u % 30)) + "%," + (55 + (u % 17)) + "%)";
  }
  function showTip(event, text) {
    tip.textContent = text;
    tip.hidden = false;
    const x = Math.min(event.clientX + 12, window.innerWidth - tip.offsetWidth - 4);
    tip.style.left = Math.max(0, x) + "px";
    tip.style.top = event.clientY + 14 + "px";
  }
  function hideTip() {
    tip.hidden = true;
  }

  // ---- header -------------------------------------------------------------------------
  $("trace").textContent = D.trace;
  $("summary").textContent = D.summary;
  $("folded").textContent = D.folded.join("; ");
  if (D.incomplete.length) {
    const box = $("incomplete");
    box.hidden = false;
    box.textContent = "Incomplete: this picture lacks part of the trace";
    const list = document.createElement("ul");
    for (const line of D.incomplete) {
      const item = document.createElement("li");
      item.textContent = line;
      list.appendChild(item);
    }
    box.appendChild(list);
    document.title = "INCOMPLETE " + document.title;
  }

  // ---- call trees ---------------------------------------------------------------------
  function build(flat) {
    const nodes = flat.n.map((n, i) => ({
      name: D.names[n], loc: D.locations[n], other: n === 0 && i > 0,
      calls: flat.c[i], total: flat.t[i], self: flat.s[i], children: [], parent: null,
    }));
    for (let i = 1; i < nodes.length; i++) {
      nodes[i].parent = nodes[flat.p[i]];
      nodes[flat.p[i]].children.push(nodes[i]);
    }
    return nodes[0];
  }
  function merge(into, node) {
    into.calls += node.calls;
    into.total += node.total;
    into.self += node.self;
    if (!into.byName) into.byName = new Map(into.children.map((c) => [(c.other ? "o" : "f") + c.name, c]));
    for (const child of node.children) {
      const key = (child.other ? "o" : "f") + child.name;
      let same = into.byName.get(key);
      if (!same) {
        same = { name: child.name, loc: child.loc, other: child.other, calls: 0, total: 0, self: 0, children: [], parent: into };
        into.children.push(same);
        into.byName.set(key, same);
      }
      merge(same, child);
    }
  }
  const roots = D.stacks.map((s) => build(s.tree));
  const segmentRoots = D.segments.map((s) => build(s.tree));
  const merged = { name: "all", loc: "", other: false, calls: 0, total: 0, self: 0, children: [], parent: null };
  for (const root of roots) merge(merged, root);
  (function sortChildren(node) {
    node.children.sort((a, b) => b.total - a.total);
    node.children.forEach(sortChildren);
  })(merged);

  const select = $("stack");
  const all = document.createElement("option");
  all.value = "-1";
  all.textContent = "all threads (" + D.stacks.length + ")";
  select.appendChild(all);
  D.stacks.forEach((s, i) => {
    const option = document.createElement("option");
    option.value = String(i);
    option.textContent = s.label;
    select.appendChild(option);
  });
  // A pytest run's tests: the calls made during each, on its thread.
  if (D.segments.length) {
    const group = document.createElement("optgroup");
    group.label = "tests (" + D.segments.length + ")";
    D.segments.forEach((s, i) => {
      const option = document.createElement("option");
      option.value = "t" + i;
      option.textContent = s.label;
      group.appendChild(option);
    });
    select.appendChild(group);
  }
  const heap = heapProfiles(select);

  // ---- flame graph (icicle) -----------------------------------------------------------
  const flame = $("flame");
  let root = merged;
  let zoom = merged;
  let query = "";

  function matches(node) {
    return query !== "" && !node.other && node.name.toLowerCase().includes(query);
  }
  function matchedTime(node) {
    if (matches(node)) return node.total;
    let sum = 0;
    for (const child of node.children) sum += matchedTime(child);
    return sum;
  }
  function countMatches(node) {
    let n = matches(node) ? 1 : 0;
    for (const child of node.children) n += countMatches(child);
    return n;
  }

  function frame(node, depth, x, width, stem) {
    const div = document.createElement("div");
    div.className = "frame" + (node.other ? " other" : "") + (stem ? " dim" : "");
    if (matches(node)) div.classList.add("match");
    div.style.left = x + "px";
    div.style.width = width + "px";
    div.style.top = depth * ROW + "px";
    div.style.background = node.parent ? colour(node.name) : "#bbb";
    div.textContent = width > 30 ? (node.parent ? node.name : select.selectedOptions[0].textContent) : "";
    div.dataset.name = node.parent ? node.name : "";
    div.dataset.depth = String(depth);
    div.dataset.total = String(node.total);
    div.addEventListener("click", () => {
      zoom = node;
      draw();
    });
    div.addEventListener("mousemove", (e) => {
      if (root.unit) return showTip(e, heap.tip(node, root));
      const where = node.loc ? "\n" + node.loc : "";
      const name = node.parent ? node.name : "all calls";
      showTip(e, name + where +
        "\ncalls " + node.calls.toLocaleString("en-US") +
        "\ntotal " + ms(node.total) + " ms (" + pct(node.total, root.total) + ")" +
        "\nself " + ms(node.self) + " ms (" + pct(node.self, root.total) + ")");
    });
    div.addEventListener("mouseleave", hideTip);
    flame.appendChild(div);
  }

  function draw() {
    flame.textContent = "";
    const width = flame.clientWidth;
    const stem = [];
    for (let n = zoom; n; n = n.parent) stem.unshift(n);
    stem.forEach((node, depth) => frame(node, depth, 0, width, node !== zoom));
    let deepest = stem.length;
    const place = (node, depth, x) => {
      let at = x;
      for (const child of node.children) {
        const cw = zoom.total > 0 ? (child.total / zoom.total) * width : 0;
        if (cw >= 1) {
          frame(child, depth, at, cw, false);
          deepest = Math.max(deepest, depth + 1);
          place(child, depth + 1, at);
        }
        at += cw;
      }
    };
    place(zoom, stem.length, 0);
    flame.style.height = deepest * ROW + 2 + "px";
    const count = countMatches(zoom);
    $("matches").textContent = query === "" ? "" :
      count + " frame" + (count === 1 ? "" : "s") + " match, " + pct(matchedTime(zoom), zoom.total) + " of the " + (root.unit || "time") + " shown";
  }

  select.addEventListener("change", () => {
    const heapRoot = heap.pick(select.value);
    const i = Number(select.value.replace("t", ""));
    if (heapRoot) root = zoom = heapRoot;
    else if (select.value.startsWith("t")) root = zoom = segmentRoots[i];
    else root = zoom = i < 0 ? merged : roots[i];
    draw();
  });
  $("search").addEventListener("input", (e) => {
    query = e.target.value.trim().toLowerCase();
    draw();
  });
  $("reset").addEventListener("click", () => {
    zoom = root;
    draw();
  });
  window.addEventListener("resize", draw);

  // ---- timeline -----------------------------------------------------------------------
  const timeline = $("timeline");
  const span = Math.max(1, D.span_ns);
  let view = [0, span];
  const axis = document.createElement("div");
  axis.className = "axis";
  timeline.appendChild(axis);
  const lanes = D.stacks.map((s) => {
    const row = document.createElement("div");
    row.className = "row";
    const label = document.createElement("div");
    label.className = "label";
    label.textContent = s.label;
    label.title = s.label;
    const lane = document.createElement("div");
    lane.className = "lane";
    row.append(label, lane);
    timeline.appendChild(row);
    return lane;
  });

  function addLane(label, kind) {
    const row = document.createElement("div");
    row.className = "row " + kind;
    const name = document.createElement("div");
    name.className = "label";
    name.textContent = label;
    name.title = label;
    const lane = document.createElement("div");
    lane.className = "lane";
    row.append(name, lane);
    timeline.appendChild(row);
    lanes.push(lane);
    return lane;
  }
  function value(v) {
    return Number(v).toLocaleString("en-US", { maximumFractionDigits: 6 });
  }

  // The program's own instant events: a tick each (or per column, with how many it holds).
  const instantLanes = D.instants.map((t) => addLane(t.label, "instants"));
  function drawInstants(scale) {
    D.instants.forEach((t, i) => {
      const lane = instantLanes[i];
      lane.textContent = "";
      for (const [at, name, count] of t.ticks) {
        if (at < view[0] || at > view[1]) continue;
        const tick = document.createElement("div");
        tick.className = "tick";
        tick.style.left = (at - view[0]) * scale + "px";
        tick.dataset.name = name;
        tick.addEventListener("mousemove", (e) => {
          const more = count > 1 ? " and " + (count - 1).toLocaleString("en-US") + " more here" : "";
          showTip(e, name + more + "\nat " + ms(at) + " ms");
        });
        tick.addEventListener("mouseleave", hideTip);
        lane.appendChild(tick);
      }
    });
  }

  // The program's counters: a step chart each, its value on hover.
  const counterLanes = D.counters.map((c) => {
    const lane = addLane(c.label, "counter");
    lane.parentElement.dataset.counter = c.label;
    lane.parentElement.dataset.max = String(c.max);
    return lane;
  });
  function drawCounters(scale) {
    D.counters.forEach((c, i) => {
      const lane = counterLanes[i];
      lane.textContent = "";
      const canvas = document.createElement("canvas");
      const width = lane.clientWidth;
      const height = lane.clientHeight;
      canvas.width = width;
      canvas.height = height;
      const range = document.createElement("span");
      range.className = "range";
      range.textContent = "max " + value(c.max) + ", min " + value(c.min) + ", " +
        c.count.toLocaleString("en-US") + " values";
      lane.append(canvas, range);
      const ctx = canvas.getContext("2d");
      const low = Math.min(0, c.min);
      const y = (v) => height - 2 - ((v - low) / (c.max - low || 1)) * (height - 4);
      ctx.strokeStyle = "#1565c0";
      ctx.beginPath();
      let last = null;
      for (const [at, v] of c.points) {
        const x = (at - view[0]) * scale;
        if (last === null) ctx.moveTo(x, y(v));
        else ctx.lineTo(x, y(last));
        ctx.lineTo(x, y(v));
        last = v;
      }
      if (last !== null) ctx.lineTo(width, y(last));
      ctx.stroke();
      canvas.onmousemove = (e) => {
        const at = view[0] + (e.offsetX / scale);
        let shown = null;
        for (const point of c.points) {
          if (point[0] > at) break;
          shown = point;
        }
        if (shown === null) hideTip();
        else showTip(e, c.label + " = " + value(shown[1]) + "\nsince " + ms(shown[0]) + " ms");
      };
      canvas.onmouseleave = hideTip;
    });
  }

  function drawTimeline() {
    const width = lanes.length ? lanes[0].clientWidth : 0;
    const scale = width / (view[1] - view[0]);
    D.stacks.forEach((s, i) => {
      const lane = lanes[i];
      lane.textContent = "";
      for (const [begin, duration, name, calls] of s.timeline) {
        if (begin + duration < view[0] || begin > view[1]) continue;
        const div = document.createElement("div");
        div.className = "slice";
        div.dataset.name = D.names[name];
        div.style.left = (begin - view[0]) * scale + "px";
        div.style.width = Math.max(1, duration * scale) + "px";
        div.style.background = colour(D.names[name]);
        div.addEventListener("mousemove", (e) => {
          const what = calls > 1 ? calls.toLocaleString("en-US") + " short calls, the longest " + D.names[name] : D.names[name];
          showTip(e, what + "\nat " + ms(begin) + " ms\n" + ms(duration) + " ms");
        });
        div.addEventListener("mouseleave", hideTip);
        lane.appendChild(div);
      }
    });
    axis.textContent = "";
    for (let k = 0; k <= 5; k++) {
      const t = view[0] + ((view[1] - view[0]) * k) / 5;
      const mark = document.createElement("span");
      mark.style.left = (k / 5) * 100 + "%";
      mark.textContent = ms(t) + " ms";
      if (k < 5) axis.appendChild(mark);
    }
    drawInstants(scale);
    drawCounters(scale);
  }
  timeline.addEventListener("wheel", (e) => {
    const lane = lanes[0];
    if (!lane) return;
    e.preventDefault();
    const box = lane.getBoundingClientRect();
    const f = Math.min(1, Math.max(0, (e.clientX - box.left) / box.width));
    const at = view[0] + f * (view[1] - view[0]);
    const k = e.deltaY > 0 ? 1.25 : 0.8;
    const w = Math.min(span, Math.max(1000, (view[1] - view[0]) * k));
    view = [Math.max(0, at - f * w), 0];
    view[1] = Math.min(span, view[0] + w);
    view[0] = view[1] - w;
    drawTimeline();
  }, { passive: false });
  let dragging = null;
  timeline.addEventListener("mousedown", (e) => {
    dragging = { x: e.clientX, view: view.slice() };
  });
  window.addEventListener("mouseup", () => {
    dragging = null;
  });
  window.addEventListener("mousemove", (e) => {
    if (!dragging || !lanes.length) return;
    const w = dragging.view[1] - dragging.view[0];
    let from = dragging.view[0] - ((e.clientX - dragging.x) / lanes[0].clientWidth) * w;
    from = Math.min(span - w, Math.max(0, from));
    view = [from, from + w];
    drawTimeline();
  });
  timeline.addEventListener("dblclick", () => {
    view = [0, span];
    drawTimeline();
  });
  window.addEventListener("resize", drawTimeline);

  // ---- the top functions ----------------------------------------------------------------
  const columns = [
    ["calls", "CALLS", (f) => f.calls.toLocaleString("en-US")],
    ["total_ns", "TOTAL ms", (f) => ms(f.total_ns)],
    ["self_ns", "SELF ms", (f) => ms(f.self_ns)],
    ["max_ns", "MAX ms", (f) => ms(f.max_ns)],
    ["name", "FUNCTION", (f) => f.name],
    ["location", "LOCATION", (f) => f.location],
  ];
  const rows = D.functions.slice();
  let order = ["total_ns", -1];
  const head = document.querySelector("#functions thead tr");
  for (const [key, title] of columns) {
    const th = document.createElement("th");
    th.textContent = title;
    th.dataset.key = key;
    if (key === "name") th.className = "name";
    if (key === "location") th.className = "loc";
    th.addEventListener("click", () => {
      order = [key, order[0] === key ? -order[1] : (key === "name" || key === "location" ? 1 : -1)];
      drawTable();
    });
    head.appendChild(th);
  }
  function drawTable() {
    const [key, sign] = order;
    rows.sort((a, b) => (a[key] < b[key] ? -sign : a[key] > b[key] ? sign : 0));
    const body = document.querySelector("#functions tbody");
    body.textContent = "";
    for (const f of rows) {
      const tr = document.createElement("tr");
      for (const [k, , text] of columns) {
        const td = document.createElement("td");
        td.textContent = text(f);
        if (k === "name") td.className = "name";
        if (k === "location") td.className = "loc";
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
  }
  const more = D.functions_count - D.functions.length;
  $("more").textContent = more > 0 ? "... " + more.toLocaleString("en-US") + " more functions" : "";

  drawTable();
  heap.start();
  draw();
  drawTimeline();
  document.body.dataset.rendered = String(performance.now());

  // ---- heap profiles: their trees in the flame graph, chosen with the threads ---------------
  function heapProfiles(select) {
    const heaps = D.heaps || [];
    const metric = $("metric");
    const METRICS = { u: "unreleased bytes", a: "bytes allocated", c: "allocations" };
    if (heaps.length) {
      const group = document.createElement("optgroup");
      group.label = "Heap profiles";
      heaps.forEach((h, i) => {
        const option = document.createElement("option");
        option.value = "h" + i;
        option.textContent = h.label;
        group.appendChild(option);
      });
      select.appendChild(group);
      select.parentElement.firstChild.textContent = "Show ";
      if (!D.stacks.length) {
        select.remove(0);  // no threads: no "all threads"
        $("timeline").parentElement.hidden = true;
        $("functions").parentElement.hidden = true;
      }
    }
    metric.addEventListener("change", () => select.dispatchEvent(new Event("change")));
    function bytes(n) {
      const units = ["B", "KiB", "MiB", "GiB"];
      let k = 0;
      let v = Math.abs(n);
      while (v >= 1024 && k < units.length - 1) {
        v /= 1024;
        k++;
      }
      const short = k ? " (" + (n < 0 ? "-" : "") + v.toFixed(2) + " " + units[k] + ")" : "";
      return n.toLocaleString("en-US") + " B" + short;
    }
    function build(h, m) {
      const t = h.tree;
      const nodes = t.n.map((f, i) => ({
        name: t.frames[f][0], loc: t.frames[f][1], other: f === 1, calls: t.c[i],
        total: t[m][i], self: t[m][i], v: [t.u[i], t.a[i], t.c[i]], children: [], parent: null,
      }));
      for (let i = 1; i < nodes.length; i++) {
        const parent = nodes[t.p[i]];
        nodes[i].parent = parent;
        parent.children.push(nodes[i]);
        parent.self -= nodes[i].total;
      }
      nodes[0].unit = METRICS[m];
      (function sortChildren(node) {
        node.children.sort((a, b) => b.total - a.total);
        node.children.forEach(sortChildren);
      })(nodes[0]);
      return nodes[0];
    }
    return {
      // The tree of the heap `value` names (with the chosen metric), or null for a thread.
      pick(value) {
        const h = value.startsWith("h") ? heaps[Number(value.slice(1))] : null;
        metric.hidden = !h;
        return h ? build(h, metric.value) : null;
      },
      start() {
        if (!D.stacks.length && heaps.length) {
          select.value = "h0";
          root = zoom = this.pick("h0");
        }
      },
      tip(node, top) {
        const amount = (i, n) => (i === 2 ? n.toLocaleString("en-US") : bytes(n));
        const lines = [node.parent ? node.name : top.unit + " of " + select.selectedOptions[0].textContent];
        if (node.loc) lines.push(node.loc);
        ["unreleased", "allocated", "allocations"].forEach((what, i) => {
          lines.push(what + " " + amount(i, node.v[i]) + " (" + pct(node.v[i], top.v[i]) + ")");
        });
        lines.push("self " + (metric.value === "c" ? node.self.toLocaleString("en-US") : bytes(node.self)) +
          " " + top.unit);
        return lines.join("\n");
      },
    };
  }
})();
