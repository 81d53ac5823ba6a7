/* Console graph view: draws the team's graph with Cytoscape.js (vendored) from the console's
 * JSON endpoint and shows a node's details in the side panel. Everything from the server is
 * inserted as text (textContent), never as HTML: entity names and memories are agents' data. */
(function () {
  "use strict";

  var config = JSON.parse(document.getElementById("graph-config").textContent);
  var statusEl = document.getElementById("graph-status");
  var panelBody = document.getElementById("graph-panel-body");
  var panelEmpty = document.getElementById("graph-panel-empty");
  var ZERO = "00000000-0000-0000-0000-000000000000";

  var TYPE_COLOURS = {
    person: "#0072b2", preference: "#e69f00", skill: "#009e73", project: "#cc79a7",
    goal: "#d55e00", fact: "#56b4e9", concept: "#7f7f7f", organization: "#8c564b",
    location: "#17becf", custom: "#bcbd22"
  };

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") { node.textContent = attrs[k]; }
      else if (k === "className") { node.className = attrs[k]; }
      else { node.setAttribute(k, attrs[k]); }
    });
    (children || []).forEach(function (c) {
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return node;
  }

  function withAgent(url) {
    return config.agent ? url + "?agent=" + encodeURIComponent(config.agent) : url;
  }

  function centreOn(entityId) {
    var params = new URLSearchParams(window.location.search);
    params.delete("q");
    params.set("entity", entityId);
    window.location.search = params.toString();
  }

  function entityButton(id, name, type) {
    var b = el("button", { type: "button", className: "link-like", "data-entity": id,
      text: (name || id) + (type ? " (" + type + ")" : "") });
    b.addEventListener("click", function () {
      var node = window.cy && window.cy.getElementById(id);
      if (node && node.length) { selectNode(node); }
      else { centreOn(id); }  // not drawn: re-centre the graph on it
    });
    return b;
  }

  function renderPanel(d) {
    var e = d.entity;
    panelBody.textContent = "";
    panelBody.appendChild(el("h2", { text: e.name }));
    panelBody.appendChild(el("p", {}, [
      el("span", { className: "badge", text: e.entity_type }), " ",
      el("span", { className: "muted", text: e.agent_id ? "agent " + e.agent_id : "team-wide" })
    ]));
    if (e.description) { panelBody.appendChild(el("p", { text: e.description })); }
    var props = Object.keys(e.properties || {});
    if (props.length) {
      panelBody.appendChild(el("h3", { text: "Properties" }));
      var t = el("table", { className: "props" });
      props.forEach(function (k) {
        var v = e.properties[k];
        t.appendChild(el("tr", {}, [el("th", { text: k }),
          el("td", { text: typeof v === "string" ? v : JSON.stringify(v) })]));
      });
      panelBody.appendChild(t);
    }
    if (d.same_as && d.same_as.length) {
      // Team view only: the same thing in other agents' graphs (its team-level identity).
      panelBody.appendChild(el("h3", { text: "Same thing elsewhere (" + d.same_as.length + ")" }));
      var same = el("ul", { id: "graph-same-as" });
      d.same_as.forEach(function (o) {
        same.appendChild(el("li", {}, [entityButton(o.id, o.name, o.entity_type), " ",
          el("span", { className: "muted", text: o.agent_id ? "agent " + o.agent_id : "team-wide" })]));
      });
      panelBody.appendChild(same);
    }
    var centreBtn = el("button", { type: "button", className: "secondary", text: "Centre the graph here" });
    centreBtn.addEventListener("click", function () { centreOn(e.id); });
    panelBody.appendChild(el("p", {}, [centreBtn]));

    panelBody.appendChild(el("h3", { text: "Relations (" +
      (d.outgoing_relations.length + d.incoming_relations.length) + ")" }));
    var rels = el("ul", { id: "graph-relations" });
    d.outgoing_relations.forEach(function (r) {
      rels.appendChild(el("li", {}, [e.name + " —" + r.relation_type + "→ ",
        entityButton(r.other.id, r.other.name, r.other.entity_type)]));
    });
    d.incoming_relations.forEach(function (r) {
      rels.appendChild(el("li", {}, [entityButton(r.other.id, r.other.name, r.other.entity_type),
        " —" + r.relation_type + "→ " + e.name]));
    });
    if (!rels.children.length) { rels.appendChild(el("li", { className: "muted", text: "none" })); }
    panelBody.appendChild(rels);

    panelBody.appendChild(el("h3", { text: "Source memories (" + d.source_memories_total + ")" }));
    var mems = el("ul", { id: "graph-sources" });
    d.source_memories.forEach(function (m) {
      var link = el("a", { href: config.memoryUrl.replace(/0\/$/, m.id + "/"), text: "#" + m.id });
      mems.appendChild(el("li", { className: "memory" }, [link, " ",
        el("span", { className: "muted", text: m.scope + (m.agent_id ? " · " + m.agent_id : "") + " · " + (m.created_at || "").slice(0, 10) }),
        el("div", { text: m.content + (m.truncated ? "…" : "") })]));
    });
    if (!d.source_memories.length) { mems.appendChild(el("li", { className: "muted", text: "none recorded" })); }
    panelBody.appendChild(mems);
    panelEmpty.hidden = true;
    panelBody.hidden = false;
  }

  function showEntity(id) {
    panelBody.setAttribute("aria-busy", "true");
    fetch(withAgent(config.entityUrl.replace(ZERO, id)), { credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.json();
      })
      .then(renderPanel)
      .catch(function (err) {
        panelBody.textContent = "";
        panelBody.appendChild(el("p", { className: "errorlist", text: "Could not load this entity: " + err.message }));
        panelBody.hidden = false;
      })
      .finally(function () { panelBody.removeAttribute("aria-busy"); });
  }

  function selectNode(node) {
    window.cy.elements().unselect();
    node.select();
    window.cy.animate({ center: { eles: node } }, { duration: 250 });
    showEntity(node.id());
  }

  function draw(data) {
    var elements = [];
    // The team view draws the entities of different agents that are one thing (a team-level
    // identity) inside one box labelled with its name.
    var parentOf = {};
    (data.identities || []).forEach(function (g) {
      var gid = "identity:" + g.id;
      elements.push({ group: "nodes", data: { id: gid, kind: "identity",
        label: g.name + " · " + g.members.length + " entities" } });
      g.members.forEach(function (m) { parentOf[m] = gid; });
    });
    data.entities.forEach(function (e) {
      var node = { id: e.id, label: e.name, type: e.entity_type,
        colour: TYPE_COLOURS[e.entity_type] || "#667085", centre: e.id === data.centre ? 1 : 0 };
      if (parentOf[e.id]) { node.parent = parentOf[e.id]; }
      elements.push({ group: "nodes", data: node });
    });
    data.relations.forEach(function (r) {
      elements.push({ group: "edges", data: { id: r.id, source: r.source_entity_id,
        target: r.target_entity_id, label: r.relation_type } });
    });
    var cy = window.cy = cytoscape({
      container: document.getElementById("graph-canvas"),
      elements: elements,
      wheelSensitivity: 0.3,
      style: [
        { selector: "node", style: { "background-color": "data(colour)", label: "data(label)",
          "font-size": 11, "text-valign": "bottom", "text-margin-y": 3, width: 22, height: 22,
          "text-wrap": "ellipsis", "text-max-width": 120 } },
        { selector: "node[kind = 'identity']", style: { "background-color": "#f2f4f7",
          "background-opacity": 0.6, "border-width": 1.5, "border-style": "dashed",
          "border-color": "#667085", shape: "round-rectangle", "text-valign": "top", "text-margin-y": -4,
          "font-size": 10, color: "#475467", padding: 8 } },
        { selector: "node[centre = 1]", style: { width: 34, height: 34, "border-width": 3, "border-color": "#1d2330" } },
        { selector: "node:selected", style: { "border-width": 4, "border-color": "#2f5bd3" } },
        { selector: "edge", style: { width: 1.5, "line-color": "#98a2b3", "target-arrow-color": "#98a2b3",
          "target-arrow-shape": "triangle", "curve-style": "bezier", label: "data(label)",
          "font-size": 9, color: "#667085", "text-rotation": "autorotate", "text-background-color": "#fff",
          "text-background-opacity": 0.8 } },
        { selector: "edge:selected", style: { "line-color": "#2f5bd3", "target-arrow-color": "#2f5bd3", width: 3 } }
      ],
      layout: { name: elements.length > 1200 ? "grid" : "cose", animate: false, randomize: false,
        nodeRepulsion: function () { return 9000; }, idealEdgeLength: function () { return 80; },
        numIter: 600, fit: true, padding: 30 }
    });
    var legend = document.getElementById("graph-legend");
    legend.textContent = "";
    Object.keys(TYPE_COLOURS).forEach(function (t) {
      if (!data.entities.some(function (e) { return e.entity_type === t; })) { return; }
      var dot = el("span", { className: "dot" });
      dot.style.background = TYPE_COLOURS[t];
      legend.appendChild(el("span", { className: "legend-item" }, [dot, t]));
    });
    // A handful of nodes would otherwise be fitted at a huge zoom.
    if (cy.zoom() > 1.5) { cy.zoom(1.5); cy.center(); }
    cy.on("tap", "node", function (evt) {
      if (evt.target.data("kind") === "identity") { return; }  // a group box, not an entity
      selectNode(evt.target);
    });
    document.getElementById("graph-fit").addEventListener("click", function () { cy.fit(undefined, 30); });
    document.getElementById("graph-zoom-in").addEventListener("click", function () {
      cy.zoom({ level: cy.zoom() * 1.25, renderedPosition: { x: cy.width() / 2, y: cy.height() / 2 } });
    });
    document.getElementById("graph-zoom-out").addEventListener("click", function () {
      cy.zoom({ level: cy.zoom() / 1.25, renderedPosition: { x: cy.width() / 2, y: cy.height() / 2 } });
    });
    if (data.centre) {
      var c = cy.getElementById(data.centre);
      if (c.length) { selectNode(c); }
    }
  }

  function status(data) {
    var text = data.entities.length + " entities, " + data.relations.length + " relations";
    if (data.agent) { text += " · as agent " + data.agent + " sees it (own + team-wide)"; }
    else if (data.identities && data.identities.length) {
      text += " · " + data.identities.length + " shared across agents";
    }
    statusEl.textContent = text;
    statusEl.dataset.nodes = String(data.entities.length);
    statusEl.dataset.edges = String(data.relations.length);
    if (data.truncated) {
      document.getElementById("graph-caps").textContent =
        data.caps.max_nodes + " nodes, " + data.caps.max_edges + " edges";
      document.getElementById("graph-truncated").hidden = false;
    }
    if (data.matches && data.matches.length) {
      var list = document.getElementById("graph-match-list");
      data.matches.forEach(function (m) {
        var b = el("button", { type: "button", className: m.id === data.centre ? "" : "secondary",
          text: m.name + " (" + m.entity_type + ")" });
        b.addEventListener("click", function () { centreOn(m.id); });
        list.appendChild(b);
      });
      document.getElementById("graph-matches").hidden = false;
    }
    if (!data.entities.length) {
      statusEl.textContent = new URLSearchParams(config.query).get("q")
        ? "No entity matches this search." : "No entities to show yet.";
    }
  }

  fetch(config.dataUrl + (config.query ? "?" + config.query : ""), { credentials: "same-origin" })
    .then(function (r) {
      if (!r.ok) { throw new Error(r.status === 404 ? "no such entity in this team" : "HTTP " + r.status); }
      return r.json();
    })
    .then(function (data) { status(data); draw(data); })
    .catch(function (err) { statusEl.textContent = "Could not load the graph: " + err.message; });
})();
