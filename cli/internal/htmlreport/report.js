// The report page's script: it reads the JSON of #report-data and draws it.
// Every string of the data goes into the page as text (textContent), never
// as markup. Case rows, case details and timelines are built when opened.
(() => {
	"use strict";

	const data = JSON.parse(document.getElementById("report-data").textContent);
	const app = document.getElementById("app");
	const CASE_PAGE = data.case_page || 200;
	const CALL_PAGE = data.call_page || 500;
	const OPEN_GROUPS = 3;
	const SUITE = "enqueue run_suite";
	const PROVENANCES = ["verified", "reused", "simulated", "live", "changed", "stopped"];

	// ---- small DOM helpers

	function el(tag, cls, text) {
		const e = document.createElement(tag);
		if (cls) e.className = cls;
		if (text !== undefined && text !== null) e.textContent = String(text);
		return e;
	}
	function add(parent, child) {
		parent.appendChild(child);
		return child;
	}
	// show is the text of a value: a string as it is, anything else as JSON.
	function show(v) {
		if (v === undefined) return "";
		return typeof v === "string" ? v : JSON.stringify(v);
	}
	function has(o, k) {
		return o !== null && typeof o === "object" && Object.prototype.hasOwnProperty.call(o, k);
	}
	function arr(v) {
		return Array.isArray(v) ? v : [];
	}
	function yesNo(v) {
		return v === true ? "yes" : v === false ? "no" : "—";
	}
	function short(hash) {
		return typeof hash === "string" && hash.length > 16 ? hash.slice(0, 12) + "…" : show(hash);
	}
	function code(text, cls) {
		return el("code", cls, text);
	}
	// hashCode is a hash cut to 12 digits, the whole in its tooltip.
	function hashCode(hash) {
		const c = el("code", "hash", short(hash));
		c.title = show(hash);
		return c;
	}
	function button(cls, text, onClick) {
		const b = el("button", cls, text);
		b.type = "button";
		b.addEventListener("click", onClick);
		return b;
	}
	// facts adds a <dl> of the pairs whose value is not undefined/null/"".
	function facts(parent, pairs) {
		const dl = el("dl", "facts");
		for (const [name, value, key] of pairs) {
			if (value === undefined || value === null || value === "") continue;
			add(dl, el("dt", null, name));
			const dd = add(dl, el("dd", "fact"));
			dd.dataset.fact = key || name.replace(/ /g, "-");
			if (value instanceof Node) dd.appendChild(value);
			else dd.textContent = show(value);
		}
		if (dl.childNodes.length) parent.appendChild(dl);
		return dl;
	}
	// lazyDetails makes a <details> whose body build(details) makes the
	// first time it opens.
	function lazyDetails(cls, fillSummary, build, open) {
		const d = el("details", cls);
		fillSummary(add(d, el("summary")));
		let built = false;
		const ensure = () => {
			if (!built) {
				built = true;
				build(d);
			}
		};
		// Built on the click that opens it, so the body is there when the
		// click returns; the toggle event (async) covers other ways to open.
		d.firstChild.addEventListener("click", () => {
			if (!d.open) ensure();
		});
		d.addEventListener("toggle", () => {
			if (d.open) ensure();
		});
		if (open) {
			ensure();
			d.open = true;
		}
		return d;
	}
	// paged renders items into container size at a time, with a
	// "show more" button; showUpTo(i) renders through item i.
	function paged(container, items, size, render, noun) {
		const list = add(container, el("div", "list"));
		const more = add(container, button("show-more", "", () => page(size)));
		let shown = 0;
		function page(n) {
			const end = Math.min(items.length, shown + n);
			const frag = document.createDocumentFragment();
			for (; shown < end; shown++) frag.appendChild(render(items[shown], shown));
			list.appendChild(frag);
			const left = items.length - shown;
			more.hidden = left <= 0;
			more.textContent = "show " + Math.min(size, left) + " more " + noun + " (" + left + " left)";
		}
		page(size);
		if (!items.length) add(list, el("div", "empty", "no " + noun));
		return {
			showUpTo(i) {
				if (i >= shown) page((Math.floor(i / size) + 1) * size - shown);
			},
		};
	}

	// ---- field diffs, model records, line diffs, divergences

	function paths(fd) {
		if (!fd) return [];
		return [...arr(fd.added), ...arr(fd.removed), ...arr(fd.changed)];
	}
	function divergencePaths(d) {
		if (!d) return [];
		return [...new Set([...paths(d.diff), ...arr(d.model && d.model.messages)])];
	}
	function pathList(parent, list) {
		for (const p of list) add(parent, el("code", "field-path", p));
	}

	// fieldDiff renders {added, removed, changed, ignored, values} with the
	// two sides named by sides (["recorded", "actual"] or ["a", "b"]).
	function fieldDiff(fd, sides) {
		const table = el("table", "fields");
		const values = fd && fd.values && typeof fd.values === "object" ? fd.values : null;
		for (const kind of ["added", "removed", "changed", "ignored"]) {
			for (const p of arr(fd && fd[kind])) {
				const tr = add(table, el("tr", "field"));
				tr.dataset.change = kind;
				add(tr, el("td", "change-kind", kind));
				add(add(tr, el("td")), el("code", "field-path", p));
				if (values && has(values, p)) {
					const v = values[p];
					const [left, right] = sides.find(s => has(v, s[0]) || has(v, s[1])) || sides[0];
					valueCell(tr, "value-recorded", v, left);
					add(tr, el("td", "arrow", "→"));
					valueCell(tr, "value-actual", v, right);
				}
			}
		}
		return table.childNodes.length ? table : null;
	}
	function valueCell(tr, cls, v, key) {
		const td = add(tr, el("td", has(v, key) ? cls : "absent"));
		td.textContent = has(v, key) ? JSON.stringify(v[key]) : "(absent)";
		td.title = key;
	}
	// pair renders {recorded, actual} or {a, b} as "x → y".
	function pair(v) {
		if (!v || typeof v !== "object") return show(v);
		const [l, r] = has(v, "current") ? ["recorded", "current"] : has(v, "recorded") || has(v, "actual") ? ["recorded", "actual"] : ["a", "b"];
		return show(v[l] === undefined ? null : v[l]) + " → " + show(v[r] === undefined ? null : v[r]);
	}
	function lineDiff(lines, cls) {
		const pre = el("pre", "line-diff " + cls);
		for (const line of arr(lines)) {
			const s = show(line);
			const kind = s.startsWith("@@") ? "line-hunk" : s[0] === "+" ? "line-add" : s[0] === "-" ? "line-del" : "line-ctx";
			add(pre, el("span", "line " + kind, s));
		}
		return pre;
	}
	function modelRecord(m) {
		const box = el("div", "model-record");
		add(box, el("h3", null, "model call"));
		if (arr(m.parts).length) {
			const d = add(box, el("div", "model-parts", "parts changed: "));
			pathList(d, m.parts);
		}
		if (m.model) add(box, el("div", "model-name", "model: " + pair(m.model)));
		if (arr(m.system_diff).length) {
			add(box, el("div", null, "system prompt:"));
			add(box, lineDiff(m.system_diff, "system-diff"));
		}
		if (m.tools) {
			const t = add(box, el("div", "tools", "tools:"));
			for (const name of arr(m.tools.added)) add(t, el("span", "line-add", " +" + name));
			for (const name of arr(m.tools.removed)) add(t, el("span", "line-del", " −" + name));
			for (const name of arr(m.tools.changed)) add(t, el("span", "reason", " ~" + name));
		}
		if (arr(m.messages).length) {
			const d = add(box, el("div", "model-messages", "messages: "));
			pathList(d, m.messages);
		}
		return box;
	}
	function roleBadge(parent, role, causedBy) {
		if (role) {
			const r = add(parent, el("span", "role", role));
			r.dataset.role = role;
		}
		if (causedBy) {
			add(parent, el("span", "muted", "caused by"));
			add(parent, code(causedBy, "caused-by"));
		}
	}

	// divergence renders a divergence record (the case's, or a call's change).
	function divergence(d) {
		const box = el("div", "divergence");
		if (d.role) box.dataset.role = d.role;
		const head = add(box, el("div", "div-head"));
		if (d.seq !== undefined) add(head, el("span", "muted", "#" + d.seq));
		add(head, code(show(d.call), "div-call"));
		if (d.recorded_call && d.recorded_call !== d.call) {
			add(head, el("span", "muted", "recorded as"));
			add(head, code(d.recorded_call, "recorded-call"));
		}
		roleBadge(head, d.role, d.caused_by);
		if (d.recorded_fingerprint || d.actual_fingerprint) {
			const f = add(box, el("div", "fingerprints muted", "fingerprint "));
			add(f, hashCode(d.recorded_fingerprint || "—"));
			add(f, document.createTextNode(" → "));
			add(f, hashCode(d.actual_fingerprint || "—"));
		}
		if (d.no_input) add(box, el("div", "no-input", d.no_input));
		const fd = d.diff && fieldDiff(d.diff, [["recorded", "actual"], ["a", "b"]]);
		if (fd) add(box, fd);
		if (d.model) add(box, modelRecord(d.model));
		if (d.rules_changed) {
			add(box, el("h3", null, "volatile rules changed"));
			add(box, el("pre", "rules-changed", JSON.stringify(d.rules_changed, null, 2)));
		}
		return box;
	}

	// callChange renders a case diff's call line or a comparison's change.
	function callChange(c) {
		const box = el("div", "diff-call");
		box.dataset.change = show(c.change);
		box.dataset.call = show(c.call);
		const head = add(box, el("div", "div-head"));
		const ch = add(head, el("span", "change", c.change));
		ch.dataset.change = show(c.change);
		add(head, code(show(c.call), "div-call"));
		roleBadge(head, c.role, c.caused_by);
		if (arr(c.fields).length) add(head, el("span", "muted", "fields: " + c.fields.join(", ")));
		const sides = [["a", "b"], ["recorded", "actual"]];
		const lines = [];
		if (c.fingerprint) lines.push(["fingerprint", short(c.fingerprint.a) + " → " + short(c.fingerprint.b)]);
		if (c.outcome) lines.push(["outcome", pair(c.outcome)]);
		if (c.value) lines.push(["value", JSON.stringify(has(c.value, "a") ? c.value.a : null) + " → " + JSON.stringify(has(c.value, "b") ? c.value.b : null)]);
		for (const [name, text] of lines) add(box, el("div", "muted", name + ": " + text));
		for (const part of ["input", "result", "error"]) {
			const fd = c[part] && fieldDiff(c[part], sides);
			if (!fd) continue;
			add(box, el("div", "part-name", part));
			add(box, fd);
		}
		if (c.no_input) add(box, el("div", "no-input", c.no_input));
		if (c.model) add(box, modelRecord(c.model));
		return box;
	}
	function changeList(parent, title, cls, changes, calls) {
		const box = add(parent, el("div", cls));
		const h = add(box, el("h3", null, title));
		if (calls) h.textContent += " — same " + show(calls.same) + ", added " + show(calls.added) + ", removed " + show(calls.removed) + ", changed " + show(calls.changed);
		if (!arr(changes).length) add(box, el("div", "empty", "no call changed"));
		for (const c of arr(changes)) add(box, callChange(c));
		return box;
	}

	// ---- the timeline

	function notable(c) {
		return c.provenance === "changed" || c.provenance === "stopped" || (c.change !== undefined && c.change !== null);
	}
	// firstDivergenceSeq is the seq of the case's first divergence: its
	// record's, else the first changed or stopped call's.
	function firstDivergenceSeq(line, calls) {
		if (line && line.divergence && typeof line.divergence.seq === "number") return line.divergence.seq;
		const c = calls.find(notable);
		return c ? c.seq : null;
	}
	function timeline(calls, firstSeq) {
		const box = el("div", "timeline");
		box.dataset.calls = calls.length;
		const bar = add(box, el("div", "timeline-bar"));
		add(bar, el("strong", null, calls.length + " calls"));
		const legend = add(bar, el("span", "legend"));
		for (const p of PROVENANCES) {
			const b = add(legend, el("span", "prov", p));
			b.dataset.provenance = p;
		}
		const label = add(bar, el("label"));
		const only = add(label, el("input", "only-changed"));
		only.type = "checkbox";
		add(label, document.createTextNode(" only changed / stopped calls"));
		let gotoButton = null;
		if (firstSeq !== null) gotoButton = add(bar, button("goto-divergence", "first divergence: #" + firstSeq, () => gotoFirst()));

		const head = add(box, el("div", "call-head"));
		for (const h of ["seq", "call", "effect", "provenance", "role", "change"]) add(head, el("span", null, h));
		const body = add(box, el("div", "timeline-body"));
		let rows = calls;
		let pager = null;
		function draw() {
			rows = only.checked ? calls.filter(c => notable(c) || c.seq === firstSeq) : calls;
			body.textContent = "";
			pager = paged(body, rows, CALL_PAGE, c => callRow(c, firstSeq), "calls");
		}
		function gotoFirst() {
			const i = rows.findIndex(c => c.seq === firstSeq);
			if (i < 0) return;
			pager.showUpTo(i);
			const row = body.querySelector(".call.first-divergence");
			if (!row) return;
			const toggle = row.querySelector(".call-toggle");
			if (toggle && !row.querySelector(".call-extra")) toggle.click();
			row.classList.remove("focused");
			void row.offsetWidth; // restart the flash
			row.classList.add("focused");
			row.scrollIntoView({ block: "center" });
		}
		only.addEventListener("change", draw);
		draw();
		if (gotoButton && firstSeq !== null && !calls.some(c => c.seq === firstSeq)) gotoButton.disabled = true;
		return box;
	}
	function callRow(c, firstSeq) {
		const row = el("div", "call");
		row.dataset.provenance = show(c.provenance) || "none";
		row.dataset.seq = c.seq;
		const ch = c.change;
		if (ch && ch.role) row.dataset.role = ch.role;
		if (c.seq === firstSeq) row.classList.add("first-divergence");
		const main = add(row, el("div", "call-main"));
		add(main, el("span", "seq", c.seq));
		const name = add(main, el("span"));
		add(name, code(show(c.call), "call-name"));
		if (c.seq === firstSeq) add(name, el("span", "marker", "first divergence"));
		add(main, el("span", "effect", c.effect || ""));
		const prov = add(add(main, el("span")), el("span", "prov", c.provenance || "—"));
		prov.dataset.provenance = show(c.provenance);
		const role = add(main, el("span"));
		if (ch) roleBadge(role, ch.role, null);
		const change = add(main, el("span", "change-cell"));
		if (ch) {
			if (ch.caused_by) add(change, el("span", "muted", "← " + ch.caused_by + " "));
			pathList(change, divergencePaths(ch).slice(0, 4));
			let extra = null;
			add(change, button("call-toggle", "details", () => {
				if (extra) {
					extra.remove();
					extra = null;
					return;
				}
				extra = add(row, el("div", "call-extra"));
				add(extra, divergence(ch));
			}));
		}
		return row;
	}

	// ---- header and summary

	function header() {
		const h = add(app, el("header"));
		h.id = "header";
		const title = add(h, el("h1", null, data.title || "pyrula " + data.command));
		title.id = "title";
		const meta = add(h, el("div", "meta"));
		add(meta, el("span", null, "pyrula " + data.command)).id = "command";
		add(meta, el("span", null, "version " + (data.version || "unknown"))).id = "version";
		if (data.values) {
			const b = add(h, el("div", "banner", "This report holds inputs and outputs unredacted (written with --values): share it only where the data may go."));
			b.id = "values-banner";
		}
		const bar = add(h, el("div", "summary"));
		bar.id = "summary";
		return bar;
	}
	function stat(bar, key, label, value, tone) {
		if (value === undefined || value === null || value === "") return;
		const s = add(bar, el("span", "stat"));
		s.dataset.stat = key;
		if (tone) s.dataset.tone = tone;
		add(s, el("span", "stat-label", label));
		add(s, el("span", "stat-value", show(value)));
	}
	function cost(o) {
		if (!o) return undefined;
		if (o.cost_observable === false) return "not observable";
		return o.cost_usd === undefined || o.cost_usd === null ? undefined : "$" + o.cost_usd;
	}
	function summary(bar, s) {
		s = s || {};
		switch (data.command) {
			case "case test":
				stat(bar, "cases", "cases", s.cases);
				stat(bar, "passed", "passed", s.passed, s.passed ? "good" : null);
				stat(bar, "failed", "failed", s.failed, s.failed ? "bad" : null);
				stat(bar, "errors", "errors", s.errors, s.errors ? "warn" : null);
				if (s.duration_ms !== undefined) stat(bar, "duration", "duration", s.duration_ms + " ms");
				break;
			case "case run":
				stat(bar, "status", "status", s.status, s.status === "complete" ? "good" : s.status === "error" ? "bad" : "warn");
				stat(bar, "code", "code", s.code, "bad");
				stat(bar, "reason", "reason", s.reason);
				stat(bar, "cause", "cause", s.cause);
				stat(bar, "changed-axes", "changed", arr(s.changed_axes).join(", "));
				stat(bar, "live-calls", "live calls", s.live_calls);
				stat(bar, "cost", "cost", cost(s));
				break;
			case "case diff": {
				stat(bar, "result", "cases are", s.identical ? "identical" : "different", s.identical ? "good" : "bad");
				const c = s.calls || {};
				stat(bar, "same", "same calls", c.same);
				stat(bar, "added", "added", c.added, c.added ? "warn" : null);
				stat(bar, "removed", "removed", c.removed, c.removed ? "warn" : null);
				stat(bar, "changed", "changed", c.changed, c.changed ? "warn" : null);
				stat(bar, "manifest-changed", "manifest changed", arr(s.manifest_changed).join(", "));
				break;
			}
			case "enqueue run_suite": {
				const by = s.by_status || {};
				stat(bar, "status", "status", s.status, s.status === "pass" ? "good" : "bad");
				stat(bar, "code", "code", s.code, "bad");
				stat(bar, "children", "children", s.total);
				stat(bar, "passed", "passed", by.pass, by.pass ? "good" : null);
				stat(bar, "failed", "failed", by.fail, by.fail ? "bad" : null);
				stat(bar, "errors", "errors", by.error, by.error ? "warn" : null);
				if (by.skipped) stat(bar, "skipped", "skipped", by.skipped, "warn");
				stat(bar, "cost", "cost", s.cost_usd === undefined ? undefined : "$" + s.cost_usd);
				stat(bar, "live-calls", "live calls", s.live_calls);
				if (s.duration_ms !== undefined) stat(bar, "duration", "duration", s.duration_ms + " ms");
				break;
			}
			case "case compare":
				stat(bar, "same-status", "same status", yesNo(s.same_status), s.same_status ? "good" : "bad");
				stat(bar, "same-result", "same result", yesNo(s.same_result), s.same_result ? "good" : "bad");
				stat(bar, "same-calls", "same calls", yesNo(s.same_calls), s.same_calls ? "good" : "warn");
				stat(bar, "arms", "arms", arr(s.arms).length || arr(data.arms).length);
				break;
		}
	}

	// ---- case test and case run

	function caseInfo(c, i) {
		const line = c.line || {};
		const isRun = data.command === "case run" || data.command === SUITE;
		const d = line.divergence || null;
		const status = show(line.status || "unknown");
		const info = {
			index: i,
			line,
			calls: arr(c.timeline),
			status,
			failing: isRun ? status !== "complete" || arr(line.changes).length > 0 : status !== "pass",
			name: line.file || (isRun ? line.run_id : null) || (line.fixture_hash ? short(line.fixture_hash) : "case " + (i + 1)),
			target: show(line.target || ""),
			code: show(line.code || ""),
			reason: show(line.reason || ""),
			call: d ? show(d.call) : line.cause ? show(line.cause) : line.stop_key ? show(line.stop_key) : "",
			paths: divergencePaths(d),
		};
		info.signature = [status, info.code, info.reason, info.call, ...[...info.paths].sort()].join("\u0000");
		info.haystack = [info.name, info.target, info.call, info.code, info.reason, ...info.paths].join("\n").toLowerCase();
		return info;
	}
	function rowDivergence(parent, info) {
		if (!info.call && !info.paths.length) return;
		const s = add(parent, el("span", "row-divergence"));
		if (info.call) add(s, code(info.call, "div-call"));
		pathList(s, info.paths);
	}
	function statusBadge(parent, status) {
		const b = add(parent, el("span", "status", status));
		b.dataset.status = status;
	}
	function caseRow(info, open) {
		const row = lazyDetails("case-row", s => {
			statusBadge(s, info.status);
			if (info.target) add(s, el("span", "target", info.target));
			add(s, el("span", "name", info.name));
			if (info.code) add(s, el("span", "code", info.code));
			if (info.reason) add(s, el("span", "reason", info.reason));
			rowDivergence(s, info);
		}, d => add(d, caseDetail(info)), open);
		row.dataset.status = info.status;
		row.dataset.index = info.index;
		return row;
	}
	function caseDetail(info) {
		const line = info.line;
		const box = el("div", "case-detail");
		if (line.message) add(box, el("div", "message", line.message));
		facts(box, [
			["file", line.file],
			["fixture", line.fixture_hash ? code(line.fixture_hash, "hash") : null, "fixture"],
			["run", line.run_id],
			["run status", line.run_status],
			["stop key", line.stop_key === undefined || line.stop_key === null ? null : show(line.stop_key)],
			["cause", line.cause],
			["changed axes", arr(line.changed_axes).join(", ")],
			["changed calls", arr(line.changed_calls).join(", ")],
			["unconsumed keys", arr(line.unconsumed_keys).join(", ")],
			["prefix calls", line.prefix_calls],
			["calls", line.calls],
			["provenance", line.provenance ? Object.keys(line.provenance).map(k => k + " " + line.provenance[k]).join(", ") : null],
			["live calls", line.live_calls],
			["cost", cost(line.cost_usd === undefined ? null : line)],
			["code version", line.code_version ? pair(line.code_version) : null],
			["duration", line.duration_ms === undefined ? null : line.duration_ms + " ms"],
		]);
		if (line.divergence) {
			add(box, el("h3", null, "first divergence"));
			add(box, divergence(line.divergence));
		}
		if (arr(line.changes).length) {
			add(box, el("h3", null, "changes"));
			const t = add(box, el("table", "changes"));
			for (const c of line.changes) {
				const tr = add(t, el("tr"));
				add(tr, el("td", "muted", c.seq === undefined ? "" : "#" + c.seq));
				add(add(tr, el("td")), code(show(c.call), "div-call"));
				roleBadge(add(tr, el("td")), c.role, c.caused_by);
			}
		}
		if (has(line, "result") && line.result !== null) {
			add(box, lazyDetails("result", s => s.textContent = "result", d => add(d, el("pre", null, JSON.stringify(line.result, null, 2))), false));
		}
		add(box, el("h3", null, "timeline"));
		add(box, timeline(info.calls, firstDivergenceSeq(line, info.calls)));
		return box;
	}
	function caseList(infos) {
		const section = add(app, el("section"));
		section.id = "cases";
		const bar = add(section, el("div", "toolbar"));
		const filter = add(bar, el("input"));
		filter.id = "filter";
		filter.type = "search";
		filter.placeholder = "filter by name, target, call, code or path";
		const count = add(bar, el("span"));
		count.id = "filter-count";
		const list = add(section, el("div", "groups"));

		if (data.command === "case run") {
			for (const info of infos) add(list, caseRow(info, true));
			bar.hidden = true;
			return;
		}
		// Groups: the failing signatures, most cases first (then first seen),
		// then every pass in one group.
		const bySig = new Map();
		const passes = [];
		for (const info of infos) {
			if (!info.failing) {
				passes.push(info);
				continue;
			}
			if (!bySig.has(info.signature)) bySig.set(info.signature, []);
			bySig.get(info.signature).push(info);
		}
		const groups = [...bySig.values()].sort((a, b) => b.length - a.length || a[0].index - b[0].index);
		const views = groups.map((g, i) => group(list, g, false, i < OPEN_GROUPS));
		if (passes.length) views.push(group(list, passes, true, groups.length === 0 && passes.length <= CASE_PAGE));
		if (!infos.length) add(list, el("div", "empty", "no cases"));

		let timer = 0;
		function apply() {
			const q = filter.value.trim().toLowerCase();
			let n = 0;
			for (const v of views) n += v.filter(q);
			count.textContent = q ? n + " of " + infos.length + " cases match" : "";
		}
		filter.addEventListener("input", () => {
			clearTimeout(timer);
			timer = setTimeout(apply, 120);
		});
	}
	function group(parent, infos, passed, open) {
		let shown = infos;
		let summaryCount = null;
		let bodyBox = null;
		const first = infos[0];
		const d = lazyDetails("group" + (passed ? " group-passed" : ""), s => {
			summaryCount = add(s, el("span", "group-count", infos.length));
			if (passed) {
				add(s, el("span", null, " passed"));
				return;
			}
			statusBadge(s, first.status);
			if (first.code) add(s, el("span", "code", " " + first.code));
			if (first.reason) add(s, el("span", "reason", " " + first.reason));
			add(s, document.createTextNode(" "));
			rowDivergence(s, first);
		}, det => {
			bodyBox = add(det, el("div", "group-body"));
			draw();
		}, open);
		d.dataset.status = passed ? "pass" : first.status;
		d.dataset.count = infos.length;
		add(parent, d);
		function draw() {
			bodyBox.textContent = "";
			paged(bodyBox, shown, CASE_PAGE, info => caseRow(info, false), "cases");
		}
		return {
			filter(q) {
				shown = q ? infos.filter(i => i.haystack.includes(q)) : infos;
				summaryCount.textContent = q ? shown.length + " of " + infos.length : infos.length;
				d.hidden = shown.length === 0;
				if (bodyBox) draw();
				return shown.length;
			},
		};
	}

	// ---- case compare

	function compare() {
		const comparison = data.summary || {};
		const byArm = new Map(arr(comparison.arms).map(a => [a.arm, a]));
		if (comparison.fixture_hash) {
			const p = add(app, el("p", "muted", "fixture "));
			add(p, code(comparison.fixture_hash, "hash"));
		}
		const section = add(app, el("section", "arms"));
		section.id = "arms";
		arr(data.arms).forEach((a, i) => {
			const line = a.line || {};
			const outcome = line.outcome || {};
			const num = line.arm === undefined ? i + 1 : line.arm;
			const cmp = byArm.get(num) || {};
			const col = add(section, el("div", "arm"));
			col.dataset.arm = num;
			add(col, el("h2", null, "arm " + num + (i === 0 ? " (first)" : "")));
			const status = el("span");
			statusBadge(status, show(outcome.status || cmp.status || "unknown"));
			facts(col, [
				["model", line.model || cmp.model || "(recorded)", "model"],
				["prompt file", line.prompt_file || cmp.prompt_file || "(recorded)", "prompt-file"],
				["status", status, "status"],
				["code", outcome.code || cmp.code, "code"],
				["message", outcome.message, "message"],
				["cost", cost(outcome.cost_usd !== undefined ? outcome : cmp), "cost"],
				["live calls", outcome.live_calls !== undefined ? outcome.live_calls : cmp.live_calls, "live-calls"],
				["tool calls", a.tool_calls, "tool-calls"],
				["same result as first", i === 0 ? "(first arm)" : cmp.vs_first ? yesNo(cmp.vs_first.same_result) : "—", "same-as-first"],
			]);
			add(col, el("h3", null, i === 0 ? "answer" : "answer vs the first arm"));
			if (i === 0 || !a.answer_diff) {
				add(col, a.answer ? el("pre", "answer", a.answer) : el("div", "empty answer", "no answer"));
			} else if (!a.answer_diff.length) {
				add(col, el("div", "empty answer-diff", "same answer as the first arm"));
			} else {
				add(col, lineDiff(a.answer_diff, "answer-diff"));
			}
			if (i > 0 && cmp.vs_first) {
				const box = changeList(col, "changes vs the first arm", "changes-vs-first", cmp.vs_first.changes, cmp.vs_first.calls);
				const rd = cmp.vs_first.result && fieldDiff(cmp.vs_first.result, [["a", "b"], ["recorded", "actual"]]);
				if (rd) {
					const part = el("div", "result-diff");
					add(part, el("div", "part-name", "result"));
					add(part, rd);
					box.insertBefore(part, box.childNodes[1]);
				}
			}
			if (cmp.vs_recording) changeList(col, "changes vs the recording", "changes-vs-recording", cmp.vs_recording.changes, cmp.vs_recording.calls);
			const calls = arr(a.timeline);
			add(col, lazyDetails("arm-timeline", s => s.textContent = "timeline (" + calls.length + " calls)",
				d => add(d, timeline(calls, firstDivergenceSeq(outcome, calls))), false));
		});
		if (!arr(data.arms).length) add(app, el("div", "empty", "no arms"));
	}

	// ---- a suite

	function budgetText(b) {
		if (!b) return null;
		const limits = [];
		if (b.max_cost_usd !== undefined && b.max_cost_usd !== null) limits.push("max_cost_usd $" + b.max_cost_usd);
		if (b.max_live_calls !== undefined && b.max_live_calls !== null) limits.push("max_live_calls " + b.max_live_calls);
		let t = limits.join(", ") + "; " + (b.live_calls || 0) + " live calls reserved, $" + (b.spent_usd || 0) + " spent";
		if (b.unsettled_usd) t += ", $" + b.unsettled_usd + " unsettled (calls lost in flight, at their worst case)";
		return t;
	}
	function assertionText(a) {
		if (!a || typeof a !== "object") return show(a);
		const parts = [];
		for (const k of ["path", "equals", "contains", "matches", "max_cost_usd", "max_live_calls"]) {
			if (has(a, k)) parts.push(k === "path" ? show(a[k]) : k + " " + JSON.stringify(a[k]));
		}
		return parts.join(" ");
	}
	function suitePage() {
		const o = data.summary || {};
		const plan = data.plan || {};
		const children = new Map();
		arr(data.cases).forEach((c, i) => {
			const info = caseInfo(c, i);
			if (info.line.run_id) children.set(info.line.run_id, info);
		});
		const about = add(app, el("section"));
		about.id = "suite";
		facts(about, [
			["suite", o.suite_id],
			["target", o.target],
			["source", plan.source ? plan.source + " (" + arr(plan.cases).length + " cases)" : null],
			["arms", arr(o.arms).map(a => a.name).join(", ")],
			["fail fast", plan.fail_fast ? "yes" : null, "fail-fast"],
			["budget", budgetText(o.budget)],
		]);
		if (o.message) add(about, el("div", "message", o.message));

		add(app, el("h2", null, "failures")).id = "groups-title";
		const groups = add(app, el("section", "groups"));
		groups.id = "groups";
		arr(o.groups).forEach((g, i) => {
			const d = lazyDetails("group suite-group", s => {
				add(s, el("span", "group-count", g.count));
				statusBadge(s, show(g.verdict));
				if (g.code) add(s, el("span", "code", " " + g.code));
				if (g.reason) add(s, el("span", "reason", " " + g.reason));
				add(s, document.createTextNode(" "));
				const r = add(s, el("span", "row-divergence"));
				if (g.call) add(r, code(g.call, "div-call"));
				pathList(r, [...arr(g.changed), ...arr(g.added).map(p => "+" + p), ...arr(g.removed).map(p => "-" + p)]);
				add(s, el("span", "group-arms", " arms: " + arr(g.arms).join(", ")));
			}, det => {
				const body = add(det, el("div", "group-body"));
				if (g.message) add(body, el("div", "message", g.message));
				for (const ex of arr(g.examples)) {
					const box = add(body, el("div", "example"));
					box.dataset.run = show(ex.run_id);
					const child = children.get(ex.run_id);
					if (child) {
						add(box, caseRow(child, false));
						continue;
					}
					add(box, el("span", "muted", "arm " + show(ex.arm) + ", case "));
					add(box, hashCode(ex.case));
					add(box, el("span", "muted", ", run " + show(ex.run_id) + " (its events are gone from Valkey)"));
				}
				if (g.count > arr(g.examples).length) add(body, el("div", "muted", (g.count - arr(g.examples).length) + " more children in this group"));
			}, i < OPEN_GROUPS);
			d.dataset.verdict = show(g.verdict);
			d.dataset.count = g.count;
			add(groups, d);
		});
		if (!arr(o.groups).length) add(groups, el("div", "empty", "no failures: every child passed"));

		add(app, el("h2", null, "arms")).id = "arms-title";
		const table = add(app, el("table", "suite-arms"));
		table.id = "suite-arms";
		const head = add(table, el("tr"));
		for (const h of ["arm", "pass", "fail", "error", "skipped", "cost", "live calls", "calls by provenance", "assertions"]) add(head, el("th", null, h));
		arr(o.arms).forEach((a, i) => {
			const tr = add(table, el("tr", "suite-arm"));
			tr.dataset.arm = show(a.name);
			const asserts = arr(arr(plan.asserts)[i]).map(assertionText).join("; ");
			const prov = a.provenance ? Object.keys(a.provenance).sort().filter(k => a.provenance[k]).map(k => k + " " + a.provenance[k]).join(", ") : "";
			const cells = [["name", a.name], ["passed", a.passed], ["failed", a.failed], ["errors", a.errors], ["skipped", a.skipped],
				["cost", "$" + (a.cost_usd || 0)], ["live-calls", a.live_calls], ["provenance", prov], ["assertions", asserts]];
			for (const [col, v] of cells) {
				const td = add(tr, el("td", null, show(v === undefined ? "" : v)));
				td.dataset.col = col;
			}
		});
		const diffs = add(app, el("section"));
		diffs.id = "arm-diffs";
		for (const d of arr(o.arm_diffs)) {
			const row = add(diffs, el("div", "arm-diff"));
			row.dataset.arm = show(d.arm);
			row.dataset.against = show(d.against);
			add(row, el("span", null, show(d.arm) + " against " + show(d.against) + ": "));
			add(row, el("span", "differ", d.differ + (d.differ === 1 ? " case differs" : " cases differ")));
			if (d.cost_delta_usd) add(row, el("span", "cost-delta", ", cost " + (d.cost_delta_usd > 0 ? "+$" + d.cost_delta_usd : "-$" + -d.cost_delta_usd)));
			for (const c of arr(d.cases)) {
				add(row, document.createTextNode(" "));
				add(row, hashCode(c));
			}
		}
	}

	// ---- case diff

	function caseDiff() {
		const diff = data.diff || {};
		const m = diff.manifest || {};
		const changed = new Set(arr(m.changed));
		const h = add(app, el("h2", null, "manifest"));
		h.id = "manifest-title";
		const table = add(app, el("table", "manifest"));
		table.id = "manifest";
		const head = add(table, el("tr"));
		for (const t of ["field", "a", "b"]) add(head, el("th", null, t));
		for (const key of Object.keys(m)) {
			if (key === "type" || key === "changed") continue;
			const v = m[key];
			const tr = add(table, el("tr", "manifest-field"));
			tr.dataset.field = key;
			tr.dataset.changed = changed.has(key) ? "true" : "false";
			add(tr, el("th", null, key));
			if (v && typeof v === "object" && !Array.isArray(v) && (has(v, "a") || has(v, "b")) && Object.keys(v).every(k => k === "a" || k === "b")) {
				add(tr, el("td", "side-a", show(v.a === undefined ? null : v.a)));
				add(tr, el("td", "side-b", show(v.b === undefined ? null : v.b)));
			} else {
				const td = add(tr, el("td"));
				td.colSpan = 2;
				const fd = v && typeof v === "object" && fieldDiff(v, [["a", "b"], ["recorded", "actual"]]);
				if (fd) add(td, fd);
				else if (v && typeof v === "object" && Array.isArray(v.added) && Array.isArray(v.removed) && Array.isArray(v.changed)) add(td, el("span", "same", "no difference"));
				else if (v && typeof v === "object") add(td, el("pre", null, JSON.stringify(v, null, 2)));
				else add(td, el("span", "mono", show(v)));
			}
		}
		const t2 = add(app, el("h2", null, "calls"));
		t2.id = "diff-calls-title";
		const section = add(app, el("section"));
		section.id = "diff-calls";
		const calls = arr(diff.calls);
		paged(section, calls, CASE_PAGE, c => callChange(c || {}), "changed calls");
	}

	// ---- the page

	const bar = header();
	summary(bar, data.summary);
	document.title = data.title || "pyrula " + data.command;
	switch (data.command) {
		case "case test":
		case "case run":
			caseList(arr(data.cases).map(caseInfo));
			break;
		case "case compare":
			compare();
			break;
		case "case diff":
			caseDiff();
			break;
		case SUITE:
			suitePage();
			break;
	}
	document.documentElement.dataset.rendered = "true";
})();
