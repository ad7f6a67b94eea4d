// Fills the generated templates (generated/*.json) from _config, by the same rules as goodput/monitoring/placeholders.py,
// which fills them with the defaults for rules/*.rules.yaml and dashboards/*.json. Only text is substituted here;
// the rules and dashboards themselves are built once, by goodput's generators. A placeholder is a knob's name
// between NUL and SOH (\\u0000name\\u0001 in the JSON text), so a template needs no escaping.
local number(v) = std.format('%.15g', v);
local has(s, chars) = std.length([c for c in std.stringChars(s) if std.member(chars, c)]) > 0;
// a string as it appears inside a JSON string literal
local jsonText(s) = local e = std.escapeStringJson(s); std.substr(e, 1, std.length(e) - 2);

{
  // the text a knob's value puts in a template, by placeholder suffix ('' for the value itself)
  render(kind, v)::
    if kind == 'text' then { '': v }
    else if kind == 'url' then { '': std.rstripChars(v, '/') }
    else if kind == 'number' then { '': number(v) }
    else if kind == 'float' then { local s = number(v), '': if has(s, '.en') then s else s + '.0' }
    else if kind == 'alternation' then { '': std.join('|', [number(x) for x in v]) }
    else if kind == 'selector' then {
      '': v,
      _braced: if v == '' then '' else '{' + v + '}',
      _comma: if v == '' then '' else ',' + v,
    }
    else if kind == 'pattern' then {
      local at = std.findSubstr('%s', v)[0],
      _pre: std.substr(v, 0, at),
      _post: std.substr(v, at + 2, std.length(v) - at - 2),
    }
    else if kind == 'strings' || kind == 'bool' then {}
    else if kind == 'grouping' then { '': if v == '' then '' else v + ', ' }
    else error 'unknown knob kind ' + kind,

  // placeholder -> text for every knob, its value read from config at the knob's path
  params(knobs, config)::
    std.foldl(function(acc, k)
      local r = $.render(k.kind, std.foldl(function(o, key) o[key], k.path, config));
      acc { [k.param + s]: r[s] for s in std.objectFields(r) }, knobs, {}),

  // a template (JSON text) with every placeholder replaced, parsed
  fill(text, params)::
    std.parseJson(std.foldl(function(t, p) std.strReplace(t, '\\u0000' + p + '\\u0001', jsonText(params[p])),
                            std.objectFields(params), text)),
}
