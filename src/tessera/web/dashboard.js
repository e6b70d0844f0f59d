// The dashboard's script (a file: the page's CSP allows no inline script).
"use strict";
// The token comes from the URL fragment (#token=...) or the form; it is kept in this tab only.
// #job=<id> opens that job's detail and output (the URL then keeps only #job=<id>).
const fragment = new URLSearchParams(location.hash.slice(1));
let token = fragment.get("token") || sessionStorage.getItem("tessera-token");
if (token) sessionStorage.setItem("tessera-token", token);

// Control characters (C0, DEL, C1), the line and paragraph separators, and the bidirectional overrides that reorder what is shown
// (U+202A-U+202E, U+2066-U+2069) are written as visible escapes such as \u001b: a tenant's
// job name or reason must read as what it is, not rearrange the text around it.
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
function visible(text) {
  return String(text).replace(UNSAFE, c => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}
// A job's output keeps its tabs and line breaks; every other control character is escaped
// as above, so a log cannot move the cursor, recolour the page's text or reorder it.
const LOG_UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
function logText(text) {
  return String(text).replace(LOG_UNSAFE, c => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}
// Where a job is: the GPUs it holds; once its run ended, where that run ran.
function whereText(j) {
  if (j.placement) return j.placement;
  if (j.last_placement && (j.final || !j.reason)) return "ran on " + j.last_placement.text;
  return j.reason;
}
function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text === null || text === undefined ? "" : visible(text);
  if (cls) td.className = cls;
  return td;
}
function fill(id, items, render) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  for (const it of items) render(body.insertRow(), it);
}
async function api(path) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + token } });
  if (r.status === 401) throw new Error("unauthorized");
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}
async function refresh() {
  if (!token) { document.getElementById("login").style.display = "block"; return; }
  try {
    // Every unfinished job (up to 500) and the 50 newest of all: a long-pending job never
    // scrolls out of view behind newer finished ones.
    const [cluster, queues, active, recent] = await Promise.all([
      api("/api/cluster"), api("/api/queues"), api("/api/jobs?active=true&limit=500"),
      api("/api/jobs?limit=50")]);
    const seen = new Set(active.jobs.map(j => j.job_id));
    const jobs = {jobs: [...recent.jobs.filter(j => !seen.has(j.job_id)), ...active.jobs]};
    document.getElementById("login").style.display = "none";
    // A tenant's view holds its own queue's GPUs only (queue_used_gpus); the admin's, all.
    const mine = cluster.view === "queue";
    document.getElementById("use").textContent = mine ? "used by " + cluster.queue : "in use";
    fill("flavors", cluster.flavors, (row, f) => {
      const used = mine ? f.queue_used_gpus : f.used_gpus;
      row.dataset.flavor = f.flavor;
      cell(row, f.flavor); cell(row, f.nodes); cell(row, used + " / " + f.total_gpus);
      const bar = cell(row, ""); const b = document.createElement("span");
      b.style.width = (100 * used / Math.max(f.total_gpus, 1)) + "%";
      const outer = document.createElement("span"); outer.className = "bar"; outer.append(b);
      bar.append(outer);
    });
    fill("queues", queues.queues, (row, q) => {
      row.dataset.queue = q.name;
      cell(row, q.name); cell(row, q.nominal_gpus);
      cell(row, q.borrowing_limit_gpus === null ? "unlimited" : q.borrowing_limit_gpus);
      cell(row, q.used_gpus); cell(row, q.running); cell(row, q.pending);
    });
    // The poll lists lean summaries (no command); one job's detail is fetched on a click.
    fill("jobs", jobs.jobs.slice().reverse(), (row, j) => {
      row.dataset.job = j.job_id;
      cell(row, j.job_id).addEventListener("click", () => showJob(j.job_id));
      cell(row, j.name); cell(row, j.queue);
      cell(row, j.state, "state state-" + j.state); cell(row, j.gpus);
      cell(row, whereText(j));
    });
    const c = mine ? cluster.queue_counts : cluster.counts;
    document.getElementById("status").textContent =
      visible(cluster.name + " · policy " + cluster.policy + " · " + cluster.executor + " executor · " +
      (mine ? "queue " + cluster.queue + ": " : "") +
      Object.keys(c).map(k => c[k] + " " + k).join(", ")) +
      (active.next_before === null ? "" : " · only the newest 500 unfinished jobs shown (tessera jobs lists all)") +
      " · updated " + new Date().toLocaleTimeString();
    await renderJob();
  } catch (e) {
    document.getElementById("status").textContent = "error: " + visible(e.message);
    if (e.message === "unauthorized") {
      token = null; sessionStorage.removeItem("tessera-token");
      document.getElementById("login").style.display = "block";
    }
  }
}
// The job shown below the tables: its id, the rank whose output is read, and that output so
// far (read on from next_offset at every poll, the newest LOG_KEEP characters kept).
let shown = null;
const LOG_KEEP = 262144;
function showJob(id, rank) {
  shown = {id: id, rank: rank || 0, run: null, offset: 0, text: "", ranks: 0};
  history.replaceState(null, "", "#job=" + encodeURIComponent(id));
  document.getElementById("log").textContent = "";
  renderJob();
}
// The output view follows the job's newest run: once a newer run than the one shown has
// started (the job was preempted, resized or retried), read that one from its start. A run
// still only planned has no output yet, so the view stays on the last run that has some. The
// rank picker keeps following (it picks a rank, not a run); a rank the new gang has not
// falls back to rank 0.
function followNewestRun(s, newest) {
  if (s.run === null || !newest || newest.run <= s.run || newest.status === "planned") return;
  const gpus = newest.nodes.reduce((n, node) => n + node.gpu_count, 0);
  Object.assign(s, {run: newest.run, offset: 0, text: "", ranks: 0, rank: s.rank < gpus ? s.rank : 0});
}
async function renderJob() {
  if (!shown) return;
  const s = shown, out = document.getElementById("detail");
  document.getElementById("job").hidden = false;
  try {
    const path = "/api/jobs/" + encodeURIComponent(s.id);
    const j = await api(path);
    const last = j.events.slice(-10).map(e => e.kind + (e.to ? " → " + e.to : "") + (e.detail ? ": " + e.detail : ""));
    const where = j.placement ? "placement: " + j.placement
      : j.last_placement ? "ran on: " + j.last_placement.text + " (run " + j.last_placement.run + ", ended)"
      : "placement: not placed";
    // Each line escaped on its own, then joined: no tenant text can start a line of its own.
    out.textContent = [j.job_id + " (" + j.name + ") · queue " + j.queue + " · " + j.state,
                       j.gpus + " GPU(s) · " + where, ...(j.reason ? ["reason: " + j.reason] : []),
                       "command: " + JSON.stringify(j.command), "", "last events:", ...last]
      .map(visible).join("\n");
    followNewestRun(s, j.last_placement);
    const asked = {run: s.run, offset: s.offset};
    const log = await api(path + "/logs?rank=" + s.rank + "&offset=" + s.offset + (s.run ? "&run=" + s.run : ""));
    // Another job was picked, or another poll read this piece (or moved to a newer run) while
    // this one waited: keeping this answer too would show that output twice.
    if (s !== shown || s.run !== asked.run || s.offset !== asked.offset) return;
    if (log.run !== null) s.run = log.run;
    s.text = (s.text + log.text).slice(-LOG_KEEP);
    s.offset = log.next_offset;
    if (log.ranks !== s.ranks) {
      s.ranks = log.ranks;
      const pick = document.getElementById("rank");
      pick.replaceChildren(...Array.from({length: Math.max(log.ranks, 1)}, (_, i) => new Option(String(i), String(i), false, i === s.rank)));
    }
    document.getElementById("log").textContent = s.text ? logText(s.text) : "(no output yet)";
    document.getElementById("log-status").textContent = log.run === null ? "no run yet" :
      "run " + log.run + " · rank " + s.rank + " of " + log.ranks + " · " + log.size_bytes + " bytes" +
      (log.skipped_bytes ? " (" + log.skipped_bytes + " bytes over the log cap were not kept)" : "") +
      (log.running ? " · following" : "");
  } catch (e) {
    out.textContent = "error: " + visible(e.message);
  }
}
document.getElementById("rank").addEventListener("change", ev => {
  if (shown) showJob(shown.id, Number(ev.target.value));
});
document.getElementById("login").addEventListener("submit", ev => {
  ev.preventDefault(); token = document.getElementById("token").value;
  sessionStorage.setItem("tessera-token", token); refresh();
});
if (fragment.get("job")) showJob(fragment.get("job"));
refresh();
setInterval(refresh, 1000);
