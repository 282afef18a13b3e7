"""Gate declarations (SPEC 3 and 4): one test per rule, each asserting what a user sees."""

from __future__ import annotations

import json
import pickle
import textwrap

import pytest

from airflow_metric_gate.declarations import (
    GATE_DEFAULTS,
    DeclarationError,
    GateDeclaration,
    collapse_duplicates,
    declare,
    load_gates_file,
    merge_defaults,
    parse_ci_gates,
    resolve_declarations,
)

STEPS_RULE = 'must be "last", "all" or a non-empty list of unique ints >= 0'
C = {"rel_up": 0.5, "rel_down": 0.5}
TITO_V1 = "rollout/tito_session_mismatch_rate/v1/assistant_text"
TITO_V2 = "rollout/tito_session_mismatch_rate/v2/assistant_text"


def _error(**kwargs) -> DeclarationError:
    with pytest.raises(DeclarationError) as info:
        declare(**kwargs)
    return info.value


def _file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _load_error(path) -> DeclarationError:
    with pytest.raises(DeclarationError) as info:
        load_gates_file(path)
    return info.value


# -- defaults table ----------------------------------------------------------------------------


def test_defaults_table_is_exactly_the_spec_table():
    def full(steps, up, floor_up, down, floor_down):
        return {"steps": steps, "constraint": {"rel_up": up, "abs_floor_up": floor_up, "rel_down": down,
                                               "abs_floor_down": floor_down}}

    expected = {
        "train/grad_norm": full("all", 0.5, 0.1, 0.8, 0.1),
        "train/ppo_kl": full("all", 0.5, 0.02, 0.8, 0.02),
        "train/train_rollout_logprob_abs_diff": full("all", 0.5, 0.02, 0.8, 0.02),
        "train/train_rollout_kl": full("all", 0.5, 0.02, 0.8, 0.02),
        "rollout/raw_reward": full("all", 0.5, 0.05, 0.2, 0.05),
        TITO_V1: {"steps": "last", "constraint": {"rel_up": 1.0, "abs_floor_up": 0.1, "rel_down": 1.0}},
        TITO_V2: {"steps": "last", "constraint": {"rel_up": 1.0, "abs_floor_up": 0.1, "rel_down": 1.0}},
    }
    assert merge_defaults() == expected
    assert list(GATE_DEFAULTS) == list(expected)


def test_defaults_table_is_read_only():
    with pytest.raises(TypeError):
        GATE_DEFAULTS["new/metric"] = {"steps": "all"}  # type: ignore[index]
    with pytest.raises(TypeError):
        GATE_DEFAULTS["train/grad_norm"]["constraint"]["rel_up"] = 9.0  # type: ignore[index]


@pytest.mark.parametrize("metric", [TITO_V1, TITO_V2])
def test_tito_defaults_keep_last_and_leave_abs_floor_down_out_of_the_key(metric):
    d = declare(metric)
    assert d.steps == "last" and d.steps_key == '"last"'
    assert d.constraint == {"rel_up": 1.0, "abs_floor_up": 0.1, "rel_down": 1.0, "abs_floor_down": 0.0}
    assert d.constraint_key == '{"abs_floor_up":0.1,"rel_down":1.0,"rel_up":1.0}'


def test_omitted_fields_take_the_defaults_literal():
    d = declare("train/grad_norm")
    assert d.steps == "all" and d.steps_key == '"all"'
    assert d.constraint == {"rel_up": 0.5, "abs_floor_up": 0.1, "rel_down": 0.8, "abs_floor_down": 0.1}
    assert d.constraint_key == '{"abs_floor_down":0.1,"abs_floor_up":0.1,"rel_down":0.8,"rel_up":0.5}'


def test_written_fields_are_never_filled_from_defaults():
    d = declare("train/grad_norm", steps="last", constraint={"rel_up": 0.3, "rel_down": 0.3})
    assert d.steps == "last" and d.steps_key == '"last"'
    # the written constraint is not merged with the defaults entry: its floors are 0.0
    assert d.constraint == {"rel_up": 0.3, "abs_floor_up": 0.0, "rel_down": 0.3, "abs_floor_down": 0.0}
    assert d.constraint_key == '{"rel_down":0.3,"rel_up":0.3}'


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps": None}, f"field 'steps': {STEPS_RULE}, got None"),
        ({"constraint": None}, "field 'constraint': must be a mapping with keys among rel_up"),
    ],
)
def test_explicit_none_is_an_error_not_an_omission(kwargs, message):
    err = _error(metric_key="train/grad_norm", **kwargs)
    assert message in str(err)
    assert err.field == next(iter(kwargs))


def test_field_missing_after_defaults_names_field_and_missing_entry():
    err = _error(metric_key="custom/metric", constraint=C)
    assert str(err) == "gate (custom/metric): field 'steps': missing, and metric 'custom/metric' has no " \
                       "defaults entry to fill it"
    assert err.field == "steps"
    err = _error(metric_key="custom/metric", steps="all")
    assert "field 'constraint': missing, and metric 'custom/metric' has no defaults entry" in str(err)


def test_field_missing_from_a_partial_defaults_entry_is_named():
    err = _error(metric_key="custom/metric", defaults={"custom/metric": {"steps": "last"}})
    assert "field 'constraint': missing, and the defaults entry of metric 'custom/metric' does not set it" \
        in str(err)


# -- steps -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "steps",
    [[], [1, 1], [True], True, [0, -1], [1.0], "LAST", "every", 3, {"0": 1}, [[0]]],
)
def test_invalid_steps_are_rejected_with_the_rule(steps):
    err = _error(metric_key="m", steps=steps, constraint=C)
    assert f"field 'steps': {STEPS_RULE}, got {steps!r}" in str(err)
    assert err.field == "steps"


def test_duplicate_step_is_named():
    assert "(step 3 repeats)" in str(_error(metric_key="m", steps=[3, 1, 3], constraint=C))


def test_steps_keep_written_order_and_order_changes_the_key():
    a = declare("m", steps=[1, 0], constraint=C)
    b = declare("m", steps=[0, 1], constraint=C)
    assert a.steps == (1, 0) and a.steps_key == "[1,0]"
    assert b.steps == (0, 1) and b.steps_key == "[0,1]"
    assert a != b and a.coordinate != b.coordinate


def test_all_and_last_keys_are_quoted_json():
    assert declare("m", steps="all", constraint=C).steps_key == '"all"'
    assert declare("m", steps="last", constraint=C).steps_key == '"last"'


# -- constraint --------------------------------------------------------------------------------


def test_unknown_constraint_keys_are_named():
    err = _error(metric_key="m", steps="all", constraint={"rel_up": 0.1, "rel_down": 0.1, "name": "x",
                                                          "direction": "up"})
    assert "unknown key(s) 'name', 'direction' (allowed: rel_up, abs_floor_up, rel_down, abs_floor_down)" \
        in str(err)
    assert err.field == "constraint"


@pytest.mark.parametrize(
    ("constraint", "message"),
    [
        ({"rel_down": 0.1, "abs_floor_down": 0.1},
         "must name at least one up-side key (rel_up or abs_floor_up)"),
        ({"rel_up": 0.1}, "must name at least one down-side key (rel_down or abs_floor_down)"),
        ({}, "must name at least one up-side key"),
    ],
)
def test_constraint_needs_an_up_side_and_a_down_side_key(constraint, message):
    assert message in str(_error(metric_key="m", steps="all", constraint=constraint))


@pytest.mark.parametrize(
    ("value", "shown"),
    [(True, "True"), (-0.1, "-0.1"), (float("nan"), "nan"), (float("inf"), "inf"), ("0.1", "'0.1'"),
     (None, "None"), (10**400, "1000")],
)
def test_constraint_values_must_be_finite_numbers_at_least_zero(value, shown):
    err = _error(metric_key="m", steps="all", constraint={"rel_up": value, "rel_down": 0.1})
    assert f"field 'constraint': 'rel_up' must be a finite number >= 0, got {shown}" in str(err)


def test_int_and_float_literals_key_differently_and_omitted_params_stay_out():
    as_int = declare("m", steps="all", constraint={"rel_up": 1, "rel_down": 0})
    as_float = declare("m", steps="all", constraint={"rel_up": 1.0, "rel_down": 0.0})
    assert as_int.constraint_key == '{"rel_down":0,"rel_up":1}'
    assert as_float.constraint_key == '{"rel_down":0.0,"rel_up":1.0}'
    assert as_int.constraint == as_float.constraint  # same band, different coordinates
    assert as_int.coordinate != as_float.coordinate


def test_zero_constraint_values_are_allowed():
    d = declare("m", steps="all", constraint={"abs_floor_up": 0, "abs_floor_down": 0})
    assert d.constraint == {"rel_up": 0.0, "abs_floor_up": 0.0, "rel_down": 0.0, "abs_floor_down": 0.0}


# -- other fields ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"enforce": 1}, "field 'enforce': must be true or false, got 1"),
        ({"enforce": "yes"}, "field 'enforce': must be true or false, got 'yes'"),
        ({"allowlist_reason": 3}, "field 'allowlist_reason': must be a string, got 3"),
        ({"metric_key": None}, "field 'metric_key': must be a string, got None"),
    ],
)
def test_other_fields_are_validated(kwargs, message):
    args = {"metric_key": "m", "steps": "all", "constraint": C, **kwargs}
    assert message in str(_error(**args))


def test_unknown_field_is_an_error():
    with pytest.raises(DeclarationError) as info:
        resolve_declarations([{"metric_key": "m", "steps": "all", "constraint": C, "step": 3}])
    assert "gate 1 (m): field 'step': unknown field (allowed: metric_key, steps, constraint, enforce, " \
           "allowlist_reason, min_failing_steps, band, mad_k, night_mean_k, severity, policy, " \
           "direction)" in str(info.value)


def test_enforce_and_allowlist_reason_are_kept():
    d = declare("m", steps="all", constraint=C, enforce=True, allowlist_reason="known flake")
    assert d.enforce is True and d.allowlist_reason == "known flake"
    assert declare("m", steps="all", constraint=C).enforce is False


# -- the declaration object --------------------------------------------------------------------


def test_declaration_is_frozen_and_hashable():
    d = declare("train/grad_norm", steps=[2, 1], source="dag.py")
    with pytest.raises(AttributeError):
        d.steps = "all"  # type: ignore[misc]
    assert hash(d) == hash(declare("train/grad_norm", steps=[2, 1], source="elsewhere"))
    assert len({d, declare("train/grad_norm", steps=[2, 1])}) == 1


def test_declaration_round_trips_through_json():
    for d in (
        declare("train/grad_norm", steps=[3, 1], enforce=True, allowlist_reason="why", source="g.yaml:3"),
        declare(TITO_V1),
        declare("m", steps="all", constraint={"rel_up": 1, "abs_floor_down": 0.5}),
    ):
        back = GateDeclaration.from_dict(json.loads(json.dumps(d.to_dict())))
        assert back == d
        assert (back.steps_key, back.constraint_key, back.source) == (d.steps_key, d.constraint_key, d.source)
        assert back.to_dict() == d.to_dict()


def test_from_dict_rejects_something_else():
    with pytest.raises(DeclarationError, match="not a serialized gate declaration"):
        GateDeclaration.from_dict({"metric_key": "m"})


def test_declaration_error_formats_and_pickles():
    err = DeclarationError("gate 2 (m): field 'steps': bad", path="gates.yaml", line=7, field="steps")
    assert str(err) == "gates.yaml:7: gate 2 (m): field 'steps': bad"
    copy = pickle.loads(pickle.dumps(err))
    assert (str(copy), copy.field, copy.line) == (str(err), "steps", 7)


# -- merge_defaults / resolve_declarations -----------------------------------------------------


def test_defaults_extend_and_override_per_field():
    table = merge_defaults({"train/grad_norm": {"steps": [0, 10]}, "custom/loss": {"steps": "last",
                                                                                  "constraint": C}})
    assert table["train/grad_norm"] == {"steps": [0, 10], "constraint": dict(GATE_DEFAULTS["train/grad_norm"]
                                                                               ["constraint"])}
    assert table["custom/loss"] == {"steps": "last", "constraint": C}
    assert GATE_DEFAULTS["train/grad_norm"]["steps"] == "all"  # the built-in table is untouched
    d = declare("train/grad_norm", defaults={"train/grad_norm": {"steps": [0, 10]}})
    assert d.steps_key == "[0,10]" and d.constraint_key == declare("train/grad_norm").constraint_key


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"m": {"steps": None}}, f"defaults entry 'm': field 'steps': {STEPS_RULE}, got None"),
        ({"m": {"constraint": {"rel_up": 1}}},
         "defaults entry 'm': field 'constraint': must name at least one down-side key"),
        ({"m": {"direction": "up"}}, "defaults entry 'm': field 'direction': unknown field"),
        ({"m": "all"}, "defaults entry 'm': a defaults entry must be a mapping"),
        ([], "must be a mapping of metric keys to defaults entries"),
    ],
)
def test_invalid_defaults_are_rejected(extra, message):
    with pytest.raises(DeclarationError) as info:
        merge_defaults(extra)
    assert message in str(info.value)


def test_resolve_declarations_names_source_and_gate_number():
    items = [{"metric_key": "train/grad_norm"}, {"metric_key": "train/grad_norm", "steps": None}]
    with pytest.raises(DeclarationError) as info:
        resolve_declarations(items, source="nightly.select_steps")
    expected = f"nightly.select_steps: gate 2 (train/grad_norm): field 'steps': {STEPS_RULE}, got None"
    assert str(info.value) == expected


def test_resolve_declarations_passes_objects_through():
    obj = declare("m", steps="all", constraint=C)
    resolved = resolve_declarations([obj, {"metric_key": "train/ppo_kl"}])
    assert resolved[0] is obj and resolved[1].steps == "all"


def test_a_coordinate_declared_twice_collapses_with_a_warning_naming_both_places(tmp_path):
    path = _file(tmp_path, "gates.yaml", """\
        gates:
          - metric_key: m
            steps: all
            constraint: {rel_up: 0.1, rel_down: 0.1}
          - metric_key: train/ppo_kl
          - {metric_key: m, steps: all, constraint: {rel_down: 0.1, rel_up: 0.1}}
        """)
    found = load_gates_file(path)
    assert len(found) == 3  # reading keeps both; collapsing is one rule, decided below
    kept, warnings = collapse_duplicates(found)
    assert kept == [found[0], found[1]]
    assert warnings == [
        f"gate 'm' with steps \"all\" and constraint {found[0].constraint_key} is declared twice, at {path}:2 and "
        f"at {path}:6; it is gated once"
    ]
    assert collapse_duplicates(kept) == (kept, [])


@pytest.mark.parametrize("field, second", [("enforce", "enforce: true"), ("allowlist_reason", "allowlist_reason: x"),
                                           ("min_failing_steps", "min_failing_steps: 2")])
def test_a_coordinate_declared_twice_with_other_enforcement_is_an_error_naming_both_places(tmp_path, field, second):
    path = _file(tmp_path, "gates.yaml", f"""\
        gates:
          - metric_key: train/ppo_kl
          - metric_key: train/ppo_kl
            {second}
        """)
    with pytest.raises(DeclarationError) as info:
        collapse_duplicates(load_gates_file(path))
    assert f"declared twice with different {field}" in str(info.value)
    assert f"{path}:2" in str(info.value) and f"{path}:3" in str(info.value)


# -- gates files -------------------------------------------------------------------------------


def test_yaml_list_form(tmp_path):
    path = _file(tmp_path, "gates.yaml", """\
        - metric_key: train/grad_norm
        - metric_key: rollout/raw_reward
          steps: [3, 1]
          constraint: {rel_up: 1, rel_down: 0.2}
          enforce: true
        """)
    a, b = load_gates_file(path)
    assert a == declare("train/grad_norm")
    assert a.source == f"{path}:1"
    assert (b.steps, b.steps_key, b.enforce) == ((3, 1), "[3,1]", True)
    assert b.constraint_key == '{"rel_down":0.2,"rel_up":1}'
    assert b.source == f"{path}:2"


def test_yaml_mapping_with_defaults_overriding_per_field(tmp_path):
    path = _file(tmp_path, "gates.yml", """\
        defaults:
          train/grad_norm:
            steps: last
          custom/loss:
            steps: [5]
            constraint: {rel_up: 0.1, rel_down: 0.1}
        gates:
          - metric_key: train/grad_norm
          - metric_key: custom/loss
          - metric_key: train/ppo_kl
        """)
    grad, loss, kl = load_gates_file(path)
    assert grad.steps == "last" and grad.constraint_key == declare("train/grad_norm").constraint_key
    assert loss.steps_key == "[5]" and loss.constraint_key == '{"rel_down":0.1,"rel_up":0.1}'
    assert kl == declare("train/ppo_kl")
    assert grad.source == f"{path}:8"


def test_json_gates_file_in_both_forms(tmp_path):
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([{"metric_key": "m", "steps": [0, 1], "constraint": C}]))
    (d,) = load_gates_file(listed)
    assert d.steps_key == "[0,1]"
    mapped = tmp_path / "map.json"
    mapped.write_text(json.dumps({"defaults": {"m": {"steps": "all", "constraint": C}},
                                  "gates": [{"metric_key": "m"}]}))
    (d,) = load_gates_file(mapped)
    assert d.steps_key == '"all"' and d.constraint_key == '{"rel_down":0.5,"rel_up":0.5}'


def test_yaml_error_names_file_line_gate_and_field(tmp_path):
    path = _file(tmp_path, "gates.yaml", """\
        gates:
          - metric_key: rollout/raw_reward
          - metric_key: train/grad_norm
            steps: null
        """)
    err = _load_error(path)
    assert str(err) == f"{path}:3: gate 2 (train/grad_norm): field 'steps': {STEPS_RULE}, got None"
    assert (err.path, err.line, err.field) == (str(path), 3, "steps")


def test_json_error_names_file_gate_and_field(tmp_path):
    path = tmp_path / "gates.json"
    path.write_text('[\n  {"metric_key": "train/grad_norm"},\n'
                    '  {"metric_key": "train/grad_norm", "steps": null}\n]\n')
    err = _load_error(path)
    assert f"gate 2 (train/grad_norm): field 'steps': {STEPS_RULE}, got None" in str(err)
    assert str(err).startswith(f"{path}:")


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("gates.yaml", "gates: [\n", "not valid YAML"),
        ("gates.yaml", "- metric_key: m\n  steps: all\n  steps: last\n", "key 'steps' appears twice"),
        ("gates.json", '[{"metric_key": "m", "metric_key": "n"}]', "key 'metric_key' appears twice"),
        ("gates.json", "[{]", "not valid JSON"),
        ("gates.yaml", "", "the gates file is empty"),
        ("gates.yaml", "gates: {metric_key: m}\n", "field 'gates': must be a list of gate declarations"),
        ("gates.yaml", "gate: []\n",
         "field 'gate': unknown field (a gates file mapping holds: gates, defaults, policy)"),
        ("gates.yaml", "defaults: {}\n", "field 'gates': missing"),
        ("gates.yaml", "just text\n", "a gates file must hold a list of gates"),
        ("gates.yaml", "- just text\n", "gate 1: a gate must be a mapping"),
        ("gates.yaml", "defaults: {m: {steps: every}}\ngates: []\n", "defaults entry 'm': field 'steps'"),
        ("gates.toml", "", "unsupported gates file type"),
    ],
)
def test_gates_file_errors_name_the_file(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    err = _load_error(path)
    assert str(err).startswith(str(path)) and message in str(err)


def test_missing_gates_file_is_named(tmp_path):
    assert str(_load_error(tmp_path / "none.yaml")) == f"{tmp_path / 'none.yaml'}: no such gates file"


def test_explicit_empty_gates_list_declares_nothing(tmp_path):
    assert load_gates_file(_file(tmp_path, "gates.yaml", "gates: []\n")) == []


# -- register_ci_gate(...) in Python files -----------------------------------------------------


def test_ci_gates_are_read_from_top_level_bare_name_calls_only(tmp_path):
    path = _file(tmp_path, "test_gates.py", """\
        from somewhere import register_ci_gate, registry

        register_ci_gate(metric_key="train/grad_norm")
        register_ci_gate(metric_key="m", steps=[2, 0], constraint={"rel_up": 1, "rel_down": 0.5})
        gate = register_ci_gate(metric_key="ignored/assigned", steps=oops())
        _ = register_ci_gate(metric_key="ignored/underscore", steps=oops())
        annotated: object = register_ci_gate(metric_key="ignored/annotated", steps=oops())

        def test_inside():
            register_ci_gate(metric_key="ignored/in_function", steps=oops())

        class Holder:
            register_ci_gate(metric_key="ignored/in_class", steps=oops())

        if True:
            register_ci_gate(metric_key="ignored/in_if", steps=oops())

        registry.register_ci_gate(metric_key="ignored/attribute", steps=oops())
        print(register_ci_gate(metric_key="ignored/nested", steps=oops()))
        """)
    a, b = parse_ci_gates(path)
    assert a == declare("train/grad_norm") and a.source == f"{path}:3"
    assert (b.metric_key, b.steps_key, b.constraint_key) == ("m", "[2,0]", '{"rel_down":0.5,"rel_up":1}')
    assert b.source == f"{path}:4"
    assert [d.metric_key for d in load_gates_file(path)] == ["train/grad_norm", "m"]


def test_ci_gate_file_is_never_executed(tmp_path):
    marker = tmp_path / "executed.txt"
    path = _file(tmp_path, "test_gates.py", f"""\
        open({str(marker)!r}, "w").write("ran")
        import nonexistent_module_for_the_gate_test
        raise SystemExit("executed")
        register_ci_gate(metric_key="train/ppo_kl", enforce=True)
        """)
    (d,) = parse_ci_gates(path)
    assert d.metric_key == "train/ppo_kl" and d.enforce is True
    assert not marker.exists()


def test_ci_gate_negative_numbers_are_literals_and_fail_the_shared_rule(tmp_path):
    path = _file(tmp_path, "test_gates.py", """\
        register_ci_gate(metric_key="m", steps="all", constraint={"rel_up": -0.5, "rel_down": 0.1})
        """)
    with pytest.raises(DeclarationError) as info:
        parse_ci_gates(path)
    expected = f"{path}:1: gate 1 (m): field 'constraint': 'rel_up' must be a finite number >= 0, got -0.5"
    assert str(info.value) == expected


@pytest.mark.parametrize(
    ("call", "line", "field", "message"),
    [
        ('register_ci_gate("train/grad_norm")', 1, None,
         "positional argument 1 (`'train/grad_norm'`): arguments must be keywords"),
        ('register_ci_gate(metric_key=NAME)', 1, "metric_key",
         "argument 'metric_key': `NAME` is not a literal"),
        ('register_ci_gate(metric_key="m",\n    steps=list(range(3)))', 2, "steps",
         "argument 'steps': `list(range(3))` is not a literal"),
        ('register_ci_gate(metric_key="m", constraint={1: 0.5})', 1, "constraint",
         "argument 'constraint': dict key `1` is not a string"),
        ('register_ci_gate(metric_key="m", constraint={"rel_up": 1, "rel_up": 2})', 1, "constraint",
         "argument 'constraint': dict key 'rel_up' appears twice"),
        ('register_ci_gate(metric_key="m", constraint={**BASE})', 1, "constraint",
         "argument 'constraint': `**` expansion in a dict is not a literal"),
        ('register_ci_gate(metric_key="m", steps=(1, 2))', 1, "steps",
         "argument 'steps': `(1, 2)` is not a literal"),
        ('register_ci_gate(**GATE)', 1, None, "`**GATE`: arguments must be written one by one"),
        ('register_ci_gate(metric_key="m", metric_key="n")', 1, "metric_key",
         "argument 'metric_key': given twice"),
    ],
)
def test_ci_gate_argument_errors_name_file_line_and_argument(tmp_path, call, line, field, message):
    path = _file(tmp_path, "test_gates.py", call + "\n")
    with pytest.raises(DeclarationError) as info:
        parse_ci_gates(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field)
    assert str(err).startswith(f"{path}:{line}: register_ci_gate(...)")
    assert message in str(err)


def test_ci_gate_syntax_error_names_the_line(tmp_path):
    path = _file(tmp_path, "test_gates.py", "x = 1\ndef broken(:\n")
    with pytest.raises(DeclarationError) as info:
        parse_ci_gates(path)
    assert info.value.line == 2 and "not valid Python" in str(info.value)


# -- one rule, one message, whatever the source -------------------------------------------------


@pytest.mark.parametrize(
    ("python", "yaml_text", "py_text"),
    [
        ({"steps": None}, "steps: null", "steps=None"),
        ({"steps": [1, 1]}, "steps: [1, 1]", "steps=[1, 1]"),
        ({"steps": [True]}, "steps: [true]", "steps=[True]"),
        ({"constraint": {"rel_up": 0.1, "name": "x"}}, "constraint: {rel_up: 0.1, name: x}",
         'constraint={"rel_up": 0.1, "name": "x"}'),
        ({"constraint": {"rel_up": True, "rel_down": 0.1}}, "constraint: {rel_up: true, rel_down: 0.1}",
         'constraint={"rel_up": True, "rel_down": 0.1}'),
        ({"enforce": "yes"}, "enforce: 'yes'", 'enforce="yes"'),
        ({"side": "up"}, "side: up", 'side="up"'),
    ],
)
def test_same_rule_gives_the_same_message_from_every_source(tmp_path, python, yaml_text, py_text):
    messages = []
    with pytest.raises(DeclarationError) as info:
        resolve_declarations([{"metric_key": "train/grad_norm", **python}])
    messages.append(info.value.message)
    yaml_path = _file(tmp_path, "gates.yaml", f"- metric_key: train/grad_norm\n  {yaml_text}\n")
    messages.append(_load_error(yaml_path).message)
    json_path = tmp_path / "gates.json"
    json_path.write_text(json.dumps([{"metric_key": "train/grad_norm", **python}]))
    messages.append(_load_error(json_path).message)
    py_path = _file(tmp_path, "test_gates.py", f'register_ci_gate(metric_key="train/grad_norm", {py_text})\n')
    messages.append(_load_error(py_path).message)
    assert messages[0].startswith("gate 1 (train/grad_norm): field ")
    assert len(set(messages)) == 1, messages
    if "side" not in python:
        with pytest.raises(DeclarationError) as info:
            declare("train/grad_norm", **python)
        assert info.value.message == messages[0].replace("gate 1 ", "gate ", 1)
