<%@ page contentType="text/plain" session="false" %><%
  jakarta.servlet.http.HttpSession s = request.getSession(false);
  if (s == null || s.getAttribute("user") == null) { response.setStatus(401); out.print("no session"); return; }
%>cart of <%= s.getAttribute("user") %>
