"""The chart gives the extender and the device plugin one whole-card resource."""

from __future__ import annotations

from tests.chart import render
from webhook.cli.serve import device_plugin as serve_device_plugin
from webhook.cli.serve import extender as serve_extender


def test_extender_plugin_and_scheduler_agree_on_a_renamed_whole_card_resource() -> None:
    objects = render.render({"gpuResources": {"wholeCard": "example.com/card"}})

    def args(kind: str, suffix: str) -> list[str]:
        container = render.find(objects, kind, suffix)["spec"]["template"]["spec"]["containers"][0]
        return list(container["args"][1:])

    extender = serve_extender.build_parser().parse_args(args("Deployment", "-extender"))
    plugin = serve_device_plugin.build_parser().parse_args(args("DaemonSet", "-device-plugin"))
    assert extender.whole_card_resource == plugin.whole_card_resource == "example.com/card"
