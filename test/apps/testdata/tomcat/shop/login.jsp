<%@ page contentType="text/plain" %><% session.setAttribute("user", request.getParameter("user")); %>logged in as <%= session.getAttribute("user") %>
