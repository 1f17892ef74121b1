<%-- session="false": only /login makes a session; /ready (the readiness
     probe) and requests without one make none. --%>
<%@ page contentType="application/json" session="false" %><%
  String pod = System.getenv("POD_NAME"), version = System.getenv("VERSION");
  String path = request.getServletPath();
  jakarta.servlet.http.HttpSession s = request.getSession(false);
  if (path.equals("/ready")) {
    out.print("{\"pod\":\"" + pod + "\",\"version\":\"" + version + "\"}");
    return;
  }
  if (path.equals("/login")) {
    if (s != null) { s.invalidate(); }
    s = request.getSession(true);
    s.setMaxInactiveInterval(Integer.parseInt(System.getenv().getOrDefault("IDLE_SECONDS", "1800")));
    s.setAttribute("user", String.valueOf(request.getParameter("user")).replaceAll("[^A-Za-z0-9_-]", ""));
  } else if (path.equals("/logout")) {
    if (s != null) { s.invalidate(); }
    out.print("{\"pod\":\"" + pod + "\",\"version\":\"" + version + "\"}");
    return;
  } else if (s == null || s.getAttribute("user") == null) {
    response.setStatus(401);
    out.print("{\"pod\":\"" + pod + "\",\"version\":\"" + version + "\",\"error\":\"no session\"}");
    return;
  }
  out.print("{\"pod\":\"" + pod + "\",\"version\":\"" + version + "\",\"session\":\"" + s.getId() + "\",\"user\":\"" + s.getAttribute("user") + "\"}");
%>
