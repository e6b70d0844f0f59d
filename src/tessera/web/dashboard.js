// The dashboard's script (a file: the page's CSP allows no inline script).
"use strict";
// The token comes from the URL fragment (#token=...) or the form; it is kept in this tab only.
let token = new URLSearchParams(location.hash.slice(1)).get("token") || sessionStorage.getItem("tessera-token");
if (token) sessionStorage.setItem("tessera-token", token);

// Control characters (C0, DEL, C1), the line and paragraph separators, and the bidirectional overrides that reorder what is shown
// (U+202A-U+202E, U+2066-U+2069) are written as visible escapes such as \u001b: a tenant's
// job name or reason must read as what it is, not rearrange the text around it.
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
function visible(text) {
  return String(text).replace(UNSAFE, c => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
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
      cell(row, j.placement || j.reason);
    });
    const c = mine ? cluster.queue_counts : cluster.counts;
    document.getElementById("status").textContent =
      visible(cluster.name + " · policy " + cluster.policy + " · " + cluster.executor + " executor · " +
      (mine ? "queue " + cluster.queue + ": " : "") +
      Object.keys(c).map(k => c[k] + " " + k).join(", ")) +
      (active.next_before === null ? "" : " · only the newest 500 unfinished jobs shown (tessera jobs lists all)") +
      " · updated " + new Date().toLocaleTimeString();
  } catch (e) {
    document.getElementById("status").textContent = "error: " + visible(e.message);
    if (e.message === "unauthorized") {
      token = null; sessionStorage.removeItem("tessera-token");
      document.getElementById("login").style.display = "block";
    }
  }
}
async function showJob(id) {
  const out = document.getElementById("detail");
  try {
    const j = await api("/api/jobs/" + encodeURIComponent(id));
    const last = j.events.slice(-10).map(e => e.kind + (e.to ? " → " + e.to : "") + (e.detail ? ": " + e.detail : ""));
    // Each line escaped on its own, then joined: no tenant text can start a line of its own.
    out.textContent = [j.job_id + " (" + j.name + ") · queue " + j.queue + " · " + j.state,
                       "command: " + JSON.stringify(j.command), "", "last events:", ...last]
      .map(visible).join("\n");
  } catch (e) {
    out.textContent = "error: " + visible(e.message);
  }
  document.getElementById("detail-title").hidden = false; out.hidden = false;
}
document.getElementById("login").addEventListener("submit", ev => {
  ev.preventDefault(); token = document.getElementById("token").value;
  sessionStorage.setItem("tessera-token", token); refresh();
});
refresh();
setInterval(refresh, 1000);
