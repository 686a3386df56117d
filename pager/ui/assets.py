"""The viewer's stylesheet and script, served by the app itself (no asset from elsewhere: works offline).

The script is small on purpose: it polls the page's JSON endpoint (with
``If-None-Match``, so an unchanged store costs a 304 and no body) and swaps
in the server-rendered fragment it returns; it opens a row on Enter; and on
the session page it shows a page's text in a side panel (through
``textContent``: a page's text is never parsed as HTML). Nothing else runs.
"""

from __future__ import annotations

from pager.ui.charts import STATE_COLORS

__all__ = ["CSS", "JS", "POLL_MS"]

POLL_MS = 2000

_STATES = "".join(f".st-{k}{{--c:{v}}}" for k, v in STATE_COLORS.items())

CSS = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#111827;background:#f9fafb}
header{background:#fff;border-bottom:1px solid #e5e7eb;padding:8px 16px;display:flex;flex-wrap:wrap;gap:8px 16px;
align-items:center;justify-content:space-between;position:sticky;top:0;z-index:2}
header .top{display:flex;flex-wrap:wrap;gap:4px 12px;align-items:baseline;min-width:0}
.brand{font-weight:700;font-size:17px;color:#3b0764;text-decoration:none}
.store,.viewer{color:#4b5563;font-size:13px;overflow-wrap:anywhere}
.live{font-size:12px;color:#047857;background:#d1fae5;border-radius:9px;padding:0 8px}
.live.stale{color:#92400e;background:#fef3c7}
main{max-width:1280px;margin:0 auto;padding:12px 16px 40px}
h1{font-size:21px;margin:6px 0 2px;overflow-wrap:anywhere}h2{font-size:16px;margin:22px 0 6px}
.count{color:#6b7280;font-weight:400;font-size:14px;margin-left:6px}
.sub,.note{color:#4b5563;font-size:13px;margin:2px 0 8px;overflow-wrap:anywhere}
a{color:#1d4ed8}
:focus-visible{outline:3px solid #f59e0b;outline-offset:1px}
.scroll{overflow-x:auto;max-width:100%;border:1px solid #e5e7eb;border-radius:6px;background:#fff}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{padding:5px 9px;border-bottom:1px solid #eef0f3;text-align:right;white-space:nowrap}
th{background:#f3f4f6;font-weight:600;font-size:13px}
th:first-child,td:first-child{text-align:left}
#sessions td:first-child{white-space:normal;overflow-wrap:anywhere;min-width:9em}
#sessions td:nth-child(2),#sessions td:nth-child(3),#sessions th:nth-child(2),#sessions th:nth-child(3){text-align:left}
tbody tr{cursor:pointer}tbody tr:hover{background:#f5f3ff}tbody tr:focus-visible{outline-offset:-3px}
tr.new{animation:flash 1.5s}
tr.total td{font-weight:600;border-top:2px solid #e5e7eb;background:#fafafa}tr.total{cursor:default}
td.neg{color:#b91c1c}
.meter{display:block;height:3px;background:#ede9fe;border-radius:2px;margin-top:2px;min-width:5em}
.meter span{display:block;height:3px;background:#7c3aed;border-radius:2px}
@keyframes flash{from{background:#ede9fe}to{background:transparent}}
.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
#pages td:nth-child(2),#pages td:nth-child(5),#pages td:nth-child(6),#pages td:nth-child(7),
#pages th:nth-child(2),#pages th:nth-child(5),#pages th:nth-child(6),#pages th:nth-child(7){text-align:left}
td.path{white-space:normal;overflow-wrap:anywhere;min-width:12em}
.search input{font:inherit;padding:5px 10px;border:1px solid #d1d5db;border-radius:6px;width:16em;max-width:60vw}
.search.big input{width:100%;max-width:40em;font-size:16px}
dl.figures{display:flex;flex-wrap:wrap;gap:8px;margin:10px 0}
dl.figures div{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:6px 12px;min-width:8em}
dl.figures dt{color:#6b7280;font-size:12px}dl.figures dd{margin:0;font-size:18px;font-weight:600}
.strip{padding:4px 0}
svg{display:block}
svg text{font:11px system-ui,sans-serif;fill:#374151}
a.bar:focus{outline:none}
a.bar:focus-visible .hit,a.bar:hover .hit{fill:#fde68a;fill-opacity:.6}
a.bar.sel .hit{fill:#c7d2fe}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:6px 0;font-size:12px;color:#374151}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:5px;vertical-align:-1px;background:var(--c)}
.sw.dash{height:0;border-top:2px dashed var(--c);background:none;border-radius:0;vertical-align:3px}
.sw.line{height:0;border-top:2px solid var(--c);background:none;border-radius:0;vertical-align:3px}
.sw.tri{width:0;height:0;border-left:6px solid transparent;border-right:6px solid transparent;
border-top:8px solid var(--c);background:none;border-radius:0}
.sw.low{height:4px;vertical-align:2px}
.sw.stale,.blk.stale{background-image:repeating-linear-gradient(45deg,rgba(255,255,255,.75) 0 2px,transparent 2px 5px)}
.pagemap{display:flex;flex-wrap:wrap;gap:2px;background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:6px}
.blk{display:block;height:18px;border-radius:2px;background:var(--c)}
.blk:hover{outline:2px solid #111827}
.badge{display:inline-block;font-size:11px;padding:0 7px;border-radius:9px;background:var(--c,#e5e7eb);
color:#111827;white-space:nowrap}
.badge.st-l1,.badge.st-card,.badge.st-full,.badge.slot-full,.badge.slot-card,.badge.slot-l1{color:#fff}
.badge-stale{font-size:11px;padding:0 6px;border-radius:9px;background:#fde68a}
.slot-l1{--c:#3b0764}.slot-full{--c:#7c3aed}.slot-stub{--c:#ddd6fe}.slot-card{--c:#3b0764}.slot-recall{--c:#c084fc}.slot-index{--c:#e5e7eb}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:16px}
.cols section{min-width:0}
ol.msgs{list-style:none;margin:0;padding:0}
.msg{background:#fff;border:1px solid #e5e7eb;border-left:5px solid var(--c,#e5e7eb);border-radius:6px;
margin:0 0 6px;padding:4px 8px}
.msg.st-dropped,.msg.st-indexed{opacity:.6;background:#f9fafb}
.msg.st-dropped pre{text-decoration:line-through;text-decoration-color:#9ca3af}
.mh{display:flex;gap:8px;align-items:center;font-size:12px}
.role{font-weight:600;color:#374151}
.open{margin-left:auto;font-size:12px}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:4px 0;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;
max-height:16em;overflow:auto}
pre.text{max-height:none;background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:8px}
dl.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(12em,1fr));gap:4px 16px;margin:8px 0}
dl.facts dt{color:#6b7280;font-size:12px}dl.facts dd{margin:0;overflow-wrap:anywhere}
nav.pn{display:flex;gap:16px;margin:2px 0 4px}
ol.hits{padding-left:20px}ol.hits li{margin:0 0 10px}
details{margin:6px 0}summary{cursor:pointer;color:#4b5563}
#panel{position:fixed;right:0;top:0;bottom:0;width:min(560px,100vw);background:#fff;border-left:1px solid #d1d5db;
box-shadow:-6px 0 18px rgba(0,0,0,.08);padding:12px 16px;overflow:auto;z-index:3}
#panel .close{float:right;font:inherit;padding:2px 10px;border:1px solid #d1d5db;border-radius:6px;background:#f9fafb;cursor:pointer}
#panel pre.text{max-height:none}
@media (max-width:700px){
main{padding:8px 8px 32px}header{padding:6px 8px}
.cols{grid-template-columns:1fr}
.search input{width:100%;max-width:none}.search{flex:1 1 100%}
dl.figures div{min-width:0;flex:1 1 40%}
th,td{padding:4px 6px}
}
""" + _STATES

JS = """
(function(){
'use strict';
var body = document.body, live = body.getAttribute('data-live'), badge = document.getElementById('live');
function go(el){ var h = el.getAttribute('data-href'); if (h) location.href = h; }
document.addEventListener('keydown', function(e){
  var t = e.target;
  if (e.key === 'Enter' && t.hasAttribute && t.hasAttribute('data-href')) { e.preventDefault(); go(t); }
  if (e.key === 'Escape') closePanel();
  if (body.getAttribute('data-page') === 'call' && !/INPUT|TEXTAREA/.test(t.tagName)) {
    var rel = e.key === 'ArrowLeft' ? 'prev' : e.key === 'ArrowRight' ? 'next' : null;
    var a = rel && document.querySelector('a[rel=' + rel + ']');
    if (a) location.href = a.getAttribute('href');
  }
});
document.addEventListener('click', function(e){
  var t = e.target;
  if (t.closest && t.closest('a,button,input,summary')) {
    var blk = t.closest('a.blk');
    if (blk && !e.ctrlKey && !e.metaKey && !e.shiftKey) { e.preventDefault(); openPage(blk.getAttribute('href')); }
    return;
  }
  var row = t.closest && t.closest('[data-href]');
  if (row) go(row);
});
function endScroll(){ document.querySelectorAll('.scroll[data-end]').forEach(function(s){ s.scrollLeft = s.scrollWidth; }); }
endScroll();
// -- the side panel: a page's text, set as text (never as HTML)
var panel = document.getElementById('panel'), opener = null;
function closePanel(){ if (panel && !panel.hidden) { panel.hidden = true; if (opener) opener.focus(); } }
function openPage(href){
  if (!panel) { location.href = href; return; }
  opener = document.activeElement;
  fetch(href.replace(/^page\\?/, 'api/page?'), {headers: {'Accept': 'application/json'}})
    .then(function(r){ if (!r.ok) throw new Error('HTTP ' + r.status); return r.json(); })
    .then(function(p){
      panel.textContent = '';
      var close = document.createElement('button'); close.className = 'close'; close.textContent = 'close';
      close.addEventListener('click', closePanel);
      var h = document.createElement('h2'); h.textContent = 'Page ' + p.page + ' · ' + p.kind + ' · ' + p.tokens.toLocaleString() + ' tokens';
      var sub = document.createElement('p'); sub.className = 'sub mono';
      sub.textContent = [p.handle, p.path, p.role, 'step ' + p.step, p.stale ? 'stale' : ''].filter(Boolean).join(' · ');
      var a = document.createElement('a'); a.href = href; a.textContent = 'open as a page';
      var pre = document.createElement('pre'); pre.className = 'text'; pre.textContent = p.text;
      panel.append(close, h, sub, a, pre); panel.hidden = false; panel.focus();
    })
    .catch(function(){ location.href = href; });
}
// -- live: poll the page's endpoint; an unchanged store answers 304
if (!live) return;
var tag = body.getAttribute('data-tag') || null, failures = 0;
function poll(){
  var headers = {'Accept': 'application/json'};
  if (tag) headers['If-None-Match'] = tag;
  fetch(live, {headers: headers, cache: 'no-store'}).then(function(r){
    failures = 0; badge.hidden = false; badge.classList.remove('stale'); badge.textContent = 'live';
    if (r.status === 304) return null;
    if (!r.ok) throw new Error('HTTP ' + r.status);
    tag = r.headers.get('ETag');
    return r.json();
  }).then(function(d){
    if (!d || d.html == null) return;
    var target = document.getElementById(d.target);
    if (!target) return;
    var focused = document.activeElement && document.activeElement.getAttribute('data-href');
    var before = {};
    target.querySelectorAll('[data-href]').forEach(function(r){ before[r.getAttribute('data-href')] = r.textContent; });
    var first = Object.keys(before).length === 0 && !target.dataset.loaded;
    target.innerHTML = d.html;  // rendered and escaped on the server, like the page itself
    target.dataset.loaded = '1';
    target.querySelectorAll('[data-href]').forEach(function(r){
      var h = r.getAttribute('data-href');
      if (!first && before[h] !== r.textContent && !(target.id === 'live-part')) r.classList.add('new');
      if (focused && h === focused) r.focus();
    });
    endScroll();
  }).catch(function(){
    failures += 1; badge.hidden = false; badge.classList.add('stale'); badge.textContent = 'offline';
  });
}
poll();
setInterval(poll, %d);
})();
""" % POLL_MS
